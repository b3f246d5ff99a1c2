#pragma once
// The one parser for quantities with units ("400Gbps", "80GiB", "1.5us",
// "989TFLOPS"). Returns the value in SI base units, or nothing with a reason.
#include <optional>
#include <string>
#include <string_view>

namespace trainsim {

enum class Quantity { Bytes, Bandwidth, Time, Flops };
const char* to_string(Quantity q);

struct ParsedQuantity {
  std::optional<double> value;  // base units: bytes, bytes/s, seconds, FLOP/s
  std::string error;            // why parsing failed
};

ParsedQuantity parse_quantity(std::string_view text, Quantity kind);

}  // namespace trainsim
