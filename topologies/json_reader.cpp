#include "topologies/json_reader.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace trainsim {

std::string Diagnostic::format() const {
  std::string out = "error: " + file;
  out += ": " + (pointer.empty() ? std::string("(document)") : pointer) + ": " + message;
  return out;
}

namespace {
std::string join_diagnostics(const std::vector<Diagnostic>& d) {
  std::string out;
  for (const auto& x : d) out += (out.empty() ? "" : "\n") + x.format();
  return out;
}
}  // namespace

InputError::InputError(std::vector<Diagnostic> diagnostics)
    : std::runtime_error(join_diagnostics(diagnostics)), diagnostics_(std::move(diagnostics)) {}

std::string json_pointer_append(const std::string& pointer, const std::string& key) {
  std::string escaped;
  for (char c : key) {
    if (c == '~') {
      escaped += "~0";
    } else if (c == '/') {
      escaped += "~1";
    } else {
      escaped += c;
    }
  }
  return pointer + "/" + escaped;
}

std::string json_pointer_append(const std::string& pointer, std::size_t index) {
  return pointer + "/" + std::to_string(index);
}

std::string describe_json_type(const nlohmann::json& v) {
  std::string dump = v.dump();
  if (dump.size() > 40) dump = dump.substr(0, 37) + "...";
  switch (v.type()) {
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "the string " + dump;
    case nlohmann::json::value_t::boolean:
      return "the boolean " + dump;
    case nlohmann::json::value_t::null:
      return "null";
    default:
      return "the number " + dump;
  }
}

namespace {
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const bool same =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  // Smallest edit distance; ties go to the longer common prefix ("tpp" -> "tp", not "pp").
  auto common_prefix = [&](const std::string& c) {
    std::size_t i = 0;
    while (i < word.size() && i < c.size() &&
           std::tolower(static_cast<unsigned char>(word[i])) == std::tolower(static_cast<unsigned char>(c[i]))) {
      ++i;
    }
    return i;
  };
  std::string best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 3) + 1, best_prefix = 0;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    const std::size_t prefix = common_prefix(c);
    if (d < best_d || (d == best_d && !best.empty() && prefix > best_prefix)) {
      best_d = d;
      best_prefix = prefix;
      best = c;
    }
  }
  return best;
}

std::optional<nlohmann::json> parse_json_text(const std::string& text, Diagnostics& diags) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::size_t line = 1, col = 1;
    const std::size_t end = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    for (std::size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    const auto pos = what.find("parse error");
    if (pos != std::string::npos) what = what.substr(pos);
    diags.error("", "malformed JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
    return std::nullopt;
  }
}

std::string read_text_file(const std::string& path, Diagnostics& diags) {
  std::ifstream in(path);
  if (!in) {
    diags.error("", "cannot read the file");
    return {};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ObjectReader::ObjectReader(const nlohmann::json& value, std::string pointer, Diagnostics& diags)
    : value_(&value), pointer_(std::move(pointer)), diags_(&diags) {
  valid_ = value.is_object();
  if (!valid_) diags.error(pointer_, "expected an object, found " + describe_json_type(value));
}

bool ObjectReader::has(const char* key) const { return valid_ && value_->contains(key); }

const nlohmann::json* ObjectReader::raw(const char* key) {
  known_.insert(key);
  if (!has(key)) return nullptr;
  return &(*value_)[key];
}

std::int64_t ObjectReader::integer(const char* key, std::int64_t fallback, std::int64_t lo, std::int64_t hi,
                                   bool required) {
  const nlohmann::json* v = raw(key);
  if (v == nullptr) {
    if (required && valid_) error(key, "required integer is missing");
    return fallback;
  }
  if (!v->is_number_integer() && !(v->is_number_float() && std::floor(v->get<double>()) == v->get<double>())) {
    error(key, "expected an integer, found " + describe_json_type(*v));
    return fallback;
  }
  const auto x = v->is_number_integer() ? v->get<std::int64_t>() : static_cast<std::int64_t>(v->get<double>());
  if (x < lo || x > hi) {
    error(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], found " +
                   std::to_string(x));
    return fallback;
  }
  return x;
}

namespace {
std::string num(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}
}  // namespace

double ObjectReader::number(const char* key, double fallback, double lo, double hi, bool required) {
  const nlohmann::json* v = raw(key);
  if (v == nullptr) {
    if (required && valid_) error(key, "required number is missing");
    return fallback;
  }
  if (!v->is_number()) {
    error(key, "expected a number, found " + describe_json_type(*v));
    return fallback;
  }
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    error(key, "expected a number in [" + num(lo) + ", " + num(hi) + "], found " + num(x));
    return fallback;
  }
  return x;
}

bool ObjectReader::boolean(const char* key, bool fallback) {
  const nlohmann::json* v = raw(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    error(key, "expected true or false, found " + describe_json_type(*v));
    return fallback;
  }
  return v->get<bool>();
}

std::string ObjectReader::string(const char* key, const std::string& fallback, bool required) {
  const nlohmann::json* v = raw(key);
  if (v == nullptr) {
    if (required && valid_) error(key, "required string is missing");
    return fallback;
  }
  if (!v->is_string()) {
    error(key, "expected a string, found " + describe_json_type(*v));
    return fallback;
  }
  return v->get<std::string>();
}

std::string ObjectReader::choice(const char* key, const std::string& fallback, const std::vector<std::string>& choices,
                                 bool required) {
  const bool present = has(key);
  std::string s = string(key, fallback, required);
  if (!present) return s;
  for (const auto& c : choices) {
    if (c == s) return s;
  }
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + ("\"" + c + "\"");
  std::string msg = "expected one of " + list + ", found \"" + s + "\"";
  const std::string near = did_you_mean(s, choices);
  if (!near.empty()) msg += " (did you mean \"" + near + "\"?)";
  error(key, msg);
  return fallback;
}

double ObjectReader::quantity(const char* key, Quantity kind, double fallback, double lo, double hi, bool required) {
  const nlohmann::json* v = raw(key);
  if (v == nullptr) {
    if (required && valid_) error(key, std::string("required ") + to_string(kind) + " is missing");
    return fallback;
  }
  double x;
  if (v->is_number()) {
    // A unit is part of the value: 1 must not quietly mean one second or one byte/s.
    x = v->get<double>();
    if (x != 0) {
      error(key, "expected " + expected_with_unit(kind) + ", found " + describe_json_type(*v) +
                     "; a bare number is only allowed for 0");
      return fallback;
    }
  } else if (v->is_string()) {
    const ParsedQuantity q = parse_quantity(v->get<std::string>(), kind);
    if (!q.value) {
      error(key, "expected " + std::string(to_string(kind)) + ": " + q.error);
      return fallback;
    }
    x = *q.value;
  } else {
    error(key, "expected " + std::string(to_string(kind)) + ", found " + describe_json_type(*v));
    return fallback;
  }
  if (!(x >= lo && x <= hi)) {
    error(key, "expected " + std::string(to_string(kind)) + " in [" + num(lo) + ", " + num(hi) +
                   "] (base units), found " + num(x));
    return fallback;
  }
  return x;
}

void ObjectReader::finish() {
  if (!valid_) return;
  std::vector<std::string> known(known_.begin(), known_.end());
  for (const auto& [key, v] : value_->items()) {
    if (known_.count(key) != 0) continue;
    std::string msg = "unknown key \"" + key + "\"";
    const std::string near = did_you_mean(key, known);
    if (!near.empty()) {
      msg += " (did you mean \"" + near + "\"?)";
    } else {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      msg += "; known keys: " + list;
    }
    diags_->error(json_pointer_append(pointer_, key), msg);
  }
}

}  // namespace trainsim
