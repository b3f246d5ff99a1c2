#pragma once
// The one parser for quantities with units ("400Gbps", "80GiB", "1.5us",
// "989TFLOPS"). Returns the value in SI base units, or nothing with a reason.
// A number without a unit is refused unless it is 0, so that "1" can never
// silently mean one second or one byte per second.
#include <optional>
#include <string>
#include <string_view>

namespace trainsim {

enum class Quantity { Bytes, Bandwidth, Time, Flops };
const char* to_string(Quantity q);
// "a duration with a unit such as \"0.5us\"": what an error says was expected.
std::string expected_with_unit(Quantity q);

struct ParsedQuantity {
  std::optional<double> value;  // base units: bytes, bytes/s, seconds, FLOP/s
  std::string error;            // why parsing failed
};

// `text` is a number followed by a unit of `kind` ("0" alone is also accepted).
ParsedQuantity parse_quantity(std::string_view text, Quantity kind);

}  // namespace trainsim
