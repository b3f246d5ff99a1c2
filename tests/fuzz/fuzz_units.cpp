// libFuzzer harness: the unit parser on every quantity kind. It returns a
// finite value or a reason, never both and never neither.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "topologies/units.hpp"

using namespace trainsim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (Quantity kind : {Quantity::Bytes, Quantity::Bandwidth, Quantity::Time, Quantity::Flops}) {
    const ParsedQuantity q = parse_quantity(text, kind);
    if (q.value.has_value() == !q.error.empty()) __builtin_trap();
    if (q.value && !std::isfinite(*q.value)) __builtin_trap();
  }
  return 0;
}
