#include "topologies/json_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
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
  // Strings from the command line may not be UTF-8: shown with U+FFFD, never a throw.
  std::string dump = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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

namespace {

// Builds the document with nlohmann's own DOM builder while tracking where the
// parser is, so that what the grammar allows but an input must not carry (a
// duplicate key, nesting beyond kMaxJsonDepth, a number beyond double range) is
// refused with its pointer before anything else sees the document.
template <typename Json>
class CheckedDomBuilder {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  CheckedDomBuilder(Json& root, std::string prefix) : dom_(root, false), prefix_(std::move(prefix)) {}

  bool null() { return value() && dom_.null(); }
  bool boolean(bool v) { return value() && dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return value() && dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return value() && dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return value() && dom_.number_float(v, s); }
  bool string(string_t& v) { return value() && dom_.string(v); }
  bool binary(binary_t& v) { return value() && dom_.binary(v); }
  bool start_object(std::size_t n) { return open(true) && dom_.start_object(n); }
  bool start_array(std::size_t n) { return open(false) && dom_.start_array(n); }
  bool end_object() {
    frames_.pop_back();
    return dom_.end_object();
  }
  bool end_array() {
    frames_.pop_back();
    return dom_.end_array();
  }
  bool key(string_t& k) {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      fail(json_pointer_append(here(), k),
           "duplicate key \"" + k + "\": " + (here().empty() ? "the document" : here()) + " gives it twice; keep one");
      return false;
    }
    f.key = k;
    return dom_.key(k);
  }
  bool parse_error(std::size_t byte, const std::string& /*token*/, const nlohmann::detail::exception& e) {
    if (e.id == 406) {
      // The lexer read a number, the parser found it beyond double range.
      fail(where_next(), "number beyond the range of a double (about 1.8e308)");
    } else {
      syntax_error_ = true;
      byte_ = byte;
      std::string what = e.what();
      const auto pos = what.find("parse error");
      message_ = pos != std::string::npos ? what.substr(pos) : what;
    }
    return false;
  }

  bool failed() const { return !message_.empty(); }
  bool syntax_error() const { return syntax_error_; }
  std::size_t byte() const { return byte_; }
  const std::string& pointer() const { return pointer_; }
  const std::string& message() const { return message_; }

 private:
  struct Frame {
    bool object;
    std::string pointer;
    std::string key;
    std::size_t index = 0;
    std::set<std::string> keys;
  };

  std::string here() const { return frames_.empty() ? prefix_ : frames_.back().pointer; }
  // The pointer of the value about to be read.
  std::string where_next() const {
    if (frames_.empty()) return prefix_;
    const Frame& f = frames_.back();
    return f.object ? json_pointer_append(f.pointer, f.key) : json_pointer_append(f.pointer, f.index);
  }
  bool value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }
  bool open(bool object) {
    const std::string at = where_next();
    value();
    if (frames_.size() >= static_cast<std::size_t>(kMaxJsonDepth)) {
      fail(at, "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels of arrays and objects");
      return false;
    }
    frames_.push_back(Frame{object, at, {}, 0, {}});
    return true;
  }
  void fail(const std::string& pointer, const std::string& message) {
    pointer_ = pointer;
    message_ = message;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  std::string prefix_;
  std::vector<Frame> frames_;
  bool syntax_error_ = false;
  std::size_t byte_ = 0;
  std::string pointer_, message_;
};

template <typename Json>
std::optional<Json> parse_checked(const std::string& text, Diagnostics& diags, const std::string& prefix) {
  Json doc;
  CheckedDomBuilder<Json> builder(doc, prefix);
  const bool ok = Json::sax_parse(text, &builder, nlohmann::detail::input_format_t::json, true, true);
  if (ok && !builder.failed()) return doc;
  if (!builder.failed()) {
    diags.error(prefix, "malformed JSON");
  } else if (builder.syntax_error()) {
    std::size_t line = 1, col = 1;
    const std::size_t end = std::min<std::size_t>(builder.byte() == 0 ? 0 : builder.byte() - 1, text.size());
    for (std::size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    diags.error(prefix, "malformed JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " +
                            builder.message());
  } else {
    diags.error(builder.pointer(), builder.message());
  }
  return std::nullopt;
}

}  // namespace

std::optional<nlohmann::json> parse_json_text(const std::string& text, Diagnostics& diags, const std::string& pointer) {
  return parse_checked<nlohmann::json>(text, diags, pointer);
}

std::optional<nlohmann::ordered_json> parse_ordered_json_text(const std::string& text, Diagnostics& diags,
                                                              const std::string& pointer) {
  return parse_checked<nlohmann::ordered_json>(text, diags, pointer);
}

std::string read_text_file(const std::string& path, Diagnostics& diags) {
  // Only a regular file: a directory cannot be read, and a FIFO or a device could
  // block forever or never end.
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    diags.error("", "cannot read the file");
    return {};
  }
  if (std::filesystem::is_directory(st)) {
    diags.error("", "is a directory; expected a file");
    return {};
  }
  if (!std::filesystem::is_regular_file(st)) {
    diags.error("", "is not a regular file (a FIFO, socket or device); expected a file");
    return {};
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxInputFileBytes) {
    diags.error("", "is " + std::to_string(size) + " bytes; input files are limited to " +
                        std::to_string(kMaxInputFileBytes) + " bytes");
    return {};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.error("", "cannot read the file");
    return {};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    diags.error("", "cannot read the file");
    return {};
  }
  return ss.str();
}

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  const auto st = std::filesystem::status(path_, ec);
  if (!ec && std::filesystem::exists(st) && std::filesystem::is_directory(st)) {
    throw InputError({Diagnostic{path_, "", "is a directory; expected a file name to write"}});
  }
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
    out_.open(path_, std::ios::binary);  // a device or FIFO: no rename over it
  } else {
    std::string name = path_ + ".tmp.XXXXXX";
    const int fd = mkstemp(name.data());
    if (fd < 0)
      throw InputError({Diagnostic{path_, "", std::string("cannot write the file: ") + std::strerror(errno)}});
    fchmod(fd, 0644);
    close(fd);
    temp_ = name;
    out_.open(temp_, std::ios::binary | std::ios::trunc);
  }
  if (!out_) {
    if (!temp_.empty()) std::filesystem::remove(temp_, ec);
    throw InputError({Diagnostic{path_, "", "cannot write the file"}});
  }
}

OutputFile::~OutputFile() {
  if (committed_ || temp_.empty()) return;
  out_.close();
  std::error_code ec;
  std::filesystem::remove(temp_, ec);
}

void OutputFile::commit() {
  out_.flush();
  const bool written = static_cast<bool>(out_);
  out_.close();
  std::error_code ec;
  if (!written || out_.fail()) {
    if (!temp_.empty()) std::filesystem::remove(temp_, ec);
    committed_ = true;
    throw InputError({Diagnostic{path_, "", "cannot write the file (a write error: is the disk full?)"}});
  }
  committed_ = true;
  if (temp_.empty()) return;
  std::filesystem::rename(temp_, path_, ec);
  if (ec) {
    std::filesystem::remove(temp_, ec);
    throw InputError({Diagnostic{path_, "", "cannot write the file: " + ec.message()}});
  }
}

void write_text_file(const std::string& path, const std::string& text) {
  OutputFile f(path);
  f.stream() << text;
  f.commit();
}

void check_output_paths(const std::vector<std::pair<std::string, std::string>>& outputs,
                        const std::vector<std::pair<std::string, std::string>>& inputs) {
  // Same file: the same inode when both exist, else the same absolute, normalised path.
  auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec)) {
      const bool eq = std::filesystem::equivalent(a, b, ec);
      if (!ec) return eq;
    }
    const auto ca = std::filesystem::weakly_canonical(std::filesystem::absolute(a, ec), ec);
    const auto cb = std::filesystem::weakly_canonical(std::filesystem::absolute(b, ec), ec);
    return ca == cb;
  };
  std::vector<Diagnostic> errors;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto& [what, path] = outputs[i];
    if (path.empty()) continue;
    bool clash = false;
    for (const auto& [in_what, in_path] : inputs) {
      if (!clash && !in_path.empty() && same(path, in_path)) {
        errors.push_back(Diagnostic{path, "", what + " names the input " + in_what + "; writing it would destroy it"});
        clash = true;
      }
    }
    for (std::size_t j = 0; j < i && !clash; ++j) {
      if (!outputs[j].second.empty() && same(path, outputs[j].second)) {
        errors.push_back(Diagnostic{path, "", what + " and " + outputs[j].first + " name the same file"});
        clash = true;
      }
    }
  }
  if (!errors.empty()) throw InputError(errors);
}

bool is_valid_utf8(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= text.size()) return false;  // truncated sequence
    for (std::size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points beyond U+10FFFF are not UTF-8.
    static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

std::optional<std::int64_t> json_integer_value(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // [-2^63, 2^63): exactly the doubles that convert to int64 without overflow.
    if (std::floor(d) == d && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
      return static_cast<std::int64_t>(d);
    }
  }
  return std::nullopt;
}

ObjectReader::ObjectReader(const nlohmann::json& value, std::string pointer, Diagnostics& diags)
    : value_(&value), pointer_(std::move(pointer)), diags_(&diags) {
  valid_ = value.is_object();
  if (!valid_) diags.error(pointer_, "expected an object, found " + describe_json_type(value));
}

bool ObjectReader::has(const char* key) const { return valid_ && value_->contains(key); }

void Diagnostics::key_asked(const std::string& pointer, const char* key) {
  if (key_log_ == nullptr) return;
  std::string generic;
  std::size_t start = 0;
  while (start < pointer.size()) {  // "/a/3/b" -> "/a/*/b"
    const std::size_t next = pointer.find('/', start + 1);
    const std::string seg = pointer.substr(start + 1, next == std::string::npos ? std::string::npos : next - start - 1);
    const bool index = !seg.empty() && seg.find_first_not_of("0123456789") == std::string::npos;
    generic += "/" + (index ? std::string("*") : seg);
    start = next == std::string::npos ? pointer.size() : next;
  }
  key_log_->insert(generic + "/" + key);
}

const nlohmann::json* ObjectReader::raw(const char* key) {
  known_.insert(key);
  diags_->key_asked(pointer_, key);
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
  const bool whole =
      v->is_number_integer() || (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>());
  if (!whole) {
    error(key, "expected an integer, found " + describe_json_type(*v));
    return fallback;
  }
  // Out of range is reported as written, never as a wrapped or truncated value.
  const std::optional<std::int64_t> x = json_integer_value(*v);
  if (!x || *x < lo || *x > hi) {
    error(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], found " + v->dump());
    return fallback;
  }
  return *x;
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
