#pragma once
// Always-on checks of cheap internal invariants (also in release builds). A
// failed check is a bug in trainsim, not bad input: it throws InternalError
// with file:line, which the CLI reports as "error: internal: ..." and exit 3.
#include <stdexcept>
#include <string>
#include <string_view>

namespace trainsim {

// An invariant of the simulator does not hold; never caused by user input
// (bad input is an InputError, reported with its file and JSON pointer).
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
// `file` relative to the source tree (the root is where this header lives).
inline std::string_view source_relative(std::string_view file) {
  constexpr std::string_view self = __FILE__, tail = "sim/check.hpp";
  if (self.ends_with(tail)) {
    const std::string_view root = self.substr(0, self.size() - tail.size());
    if (!root.empty() && file.starts_with(root)) file.remove_prefix(root.size());
  }
  return file;
}

[[noreturn]] inline void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  throw InternalError(std::string(source_relative(file)) + ":" + std::to_string(line) + ": " + message +
                      " (check failed: " + condition + ")");
}
}  // namespace detail

}  // namespace trainsim

// TRAINSIM_CHECK(cond, message): throws InternalError when cond is false.
// `message` (a string or string expression) is built only on failure.
#define TRAINSIM_CHECK(cond, message)                                         \
  do {                                                                        \
    if (!(cond)) [[unlikely]] {                                               \
      ::trainsim::detail::check_failed(__FILE__, __LINE__, #cond, (message)); \
    }                                                                         \
  } while (false)
