#pragma once
// Strict JSON input: every problem is collected with the file and the JSON
// pointer where it is, what was expected and what was found; unknown keys are
// errors with a did-you-mean. Callers read typed values, then check ok().
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "topologies/units.hpp"

namespace trainsim {

struct Diagnostic {
  std::string file;
  std::string pointer;  // RFC 6901 JSON pointer; "" = the whole document
  std::string message;
  std::string format() const;
};

// Thrown at the edge when input is invalid; carries every problem found.
class InputError : public std::runtime_error {
 public:
  explicit InputError(std::vector<Diagnostic> diagnostics);
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

class Diagnostics {
 public:
  explicit Diagnostics(std::string file) : file_(std::move(file)) {}
  void error(const std::string& pointer, const std::string& message) {
    items_.push_back(Diagnostic{file_, pointer, message});
  }
  bool ok() const { return items_.empty(); }
  const std::string& file() const { return file_; }
  const std::vector<Diagnostic>& items() const { return items_; }
  void throw_if_errors() const {
    if (!items_.empty()) throw InputError(items_);
  }

 private:
  std::string file_;
  std::vector<Diagnostic> items_;
};

std::string json_pointer_append(const std::string& pointer, const std::string& key);
std::string json_pointer_append(const std::string& pointer, std::size_t index);
std::string describe_json_type(const nlohmann::json& v);
// Closest candidate by edit distance, or "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// Parses text; on failure adds "line L, column C: ..." at pointer "" and returns nullopt.
std::optional<nlohmann::json> parse_json_text(const std::string& text, Diagnostics& diags);

// The whole file as text; on failure adds "cannot read the file" at pointer "" and returns "".
std::string read_text_file(const std::string& path, Diagnostics& diags);

// Reads one JSON object. Getters record errors and return the default when the
// value is missing or wrong; finish() reports keys nobody asked for.
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& value, std::string pointer, Diagnostics& diags);
  ~ObjectReader() = default;
  ObjectReader(const ObjectReader&) = delete;
  ObjectReader& operator=(const ObjectReader&) = delete;

  bool valid() const { return valid_; }
  const std::string& pointer() const { return pointer_; }
  std::string at(const char* key) const { return json_pointer_append(pointer_, key); }
  bool has(const char* key) const;
  // Raw access (marks the key as known); nullptr when absent.
  const nlohmann::json* raw(const char* key);

  std::int64_t integer(const char* key, std::int64_t fallback, std::int64_t lo, std::int64_t hi, bool required = false);
  double number(const char* key, double fallback, double lo, double hi, bool required = false);
  bool boolean(const char* key, bool fallback);
  std::string string(const char* key, const std::string& fallback, bool required = false);
  std::string choice(const char* key, const std::string& fallback, const std::vector<std::string>& choices,
                     bool required = false);
  // A string with a unit ("400Gbps") or the number 0; a bare non-zero number is an error.
  double quantity(const char* key, Quantity kind, double fallback, double lo, double hi, bool required = false);

  void error(const char* key, const std::string& message) { diags_->error(at(key), message); }
  Diagnostics& diagnostics() { return *diags_; }
  void finish();

 private:
  const nlohmann::json* value_;
  std::string pointer_;
  Diagnostics* diags_;
  bool valid_ = false;
  std::set<std::string> known_;
};

}  // namespace trainsim
