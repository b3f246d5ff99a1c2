#pragma once
// The double that adding `v` to 0.0 `n` times, one addition after another,
// gives (round to nearest, ties to even), in a step per binade of the sum
// rather than one per addition: the report's peak FLOP/s of a million GPUs of
// one type, bit for bit the sum a GPU-by-GPU loop gives (docs/performance.md).
#include <cstdint>

namespace trainsim {

double repeated_sum(double v, std::int64_t n);

}  // namespace trainsim
