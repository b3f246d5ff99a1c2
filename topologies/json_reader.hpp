#pragma once
// Strict JSON input: every problem is collected with the file and the JSON
// pointer where it is, what was expected and what was found; unknown keys are
// errors with a did-you-mean. Callers read typed values, then check ok().
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
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
  // Optionally records every key a reader asks for, as a pointer with array
  // indices written "*" ("/cluster/groups/*/gpu"): what the loader accepts, so
  // a test can check each key is documented.
  void log_keys_to(std::set<std::string>* log) { key_log_ = log; }
  void key_asked(const std::string& pointer, const char* key);

 private:
  std::string file_;
  std::vector<Diagnostic> items_;
  std::set<std::string>* key_log_ = nullptr;
};

std::string json_pointer_append(const std::string& pointer, const std::string& key);
std::string json_pointer_append(const std::string& pointer, std::size_t index);
std::string describe_json_type(const nlohmann::json& v);
// Closest candidate by edit distance, or "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// Deepest nesting of arrays and objects any input may have (docs/limits.md):
// deeper documents are refused while parsing, before anything recurses on them.
inline constexpr int kMaxJsonDepth = 64;
// Largest input file read (docs/limits.md).
inline constexpr std::size_t kMaxInputFileBytes = std::size_t{64} << 20;

// Parses text; `//` and `/* */` comments are allowed. On failure adds one error and
// returns nullopt: a syntax error gives "line L, column C"; a number beyond double
// range, a duplicate key or nesting deeper than kMaxJsonDepth gives its pointer.
// `pointer` prefixes the reported pointers (a value given inside a larger document).
std::optional<nlohmann::json> parse_json_text(const std::string& text, Diagnostics& diags,
                                              const std::string& pointer = "");
// The same, keeping the keys in the order of the text.
std::optional<nlohmann::ordered_json> parse_ordered_json_text(const std::string& text, Diagnostics& diags,
                                                              const std::string& pointer = "");

// The whole file as text; on failure adds "cannot read the file" (or why: a
// directory, a FIFO or device, larger than kMaxInputFileBytes) at pointer "" and
// returns "". Only regular files are opened, so a read can never block forever.
std::string read_text_file(const std::string& path, Diagnostics& diags);

// An output file written whole or not at all: the bytes go to a temporary file
// next to `path`, renamed over it by commit(); a write error or an exception
// before commit() leaves `path` as it was. A path that exists and is not a
// regular file (/dev/stdout, a FIFO) is written in place. Errors are InputError
// naming the file, so they exit non-zero like any other input problem.
class OutputFile {
 public:
  explicit OutputFile(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  std::ostream& stream() { return out_; }
  void commit();

 private:
  std::string path_, temp_;  // temp_ empty when writing in place
  std::ofstream out_;
  bool committed_ = false;
};

// Writes `text` to `path` through an OutputFile.
void write_text_file(const std::string& path, const std::string& text);

// Refuses (InputError) an output path that names one of the inputs or another
// output of the same command: `outputs` and `inputs` are (what, path) pairs,
// e.g. {"--out", "run.json"}; empty paths are skipped.
void check_output_paths(const std::vector<std::pair<std::string, std::string>>& outputs,
                        const std::vector<std::pair<std::string, std::string>>& inputs);

// Whether `text` is well-formed UTF-8 (what a JSON string must hold).
bool is_valid_utf8(const std::string& text);

// The integer value of a JSON number when it is one and fits int64 (1e3 counts;
// 2.5, 1e30 and 18446744073709551615 do not).
std::optional<std::int64_t> json_integer_value(const nlohmann::json& v);

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
