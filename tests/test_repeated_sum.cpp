#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>

#include "sim/repeated_sum.hpp"

using namespace trainsim;

namespace {
double loop_sum(double v, std::int64_t n) {
  double s = 0;
  for (std::int64_t k = 0; k < n; ++k) s += v;
  return s;
}
}  // namespace

TEST_CASE("repeated_sum equals adding one at a time, to the bit") {
  // GPU peaks (H100 BF16 dense, A100, H100 FP8, B200 FP8) over up to a million GPUs.
  for (const double peak : {989.4e12, 312e12, 1978.9e12, 4.5e15}) {
    for (const std::int64_t n : {0, 1, 2, 3, 7, 128, 4096, 32768, 262144, 1048576}) {
      CHECK(repeated_sum(peak, n) == loop_sum(peak, n));
    }
  }
  // Values whose additions tie (x.5 ulps of the sum: the parity decides), exact
  // integers, values absorbed once the sum is large, and non-normal ones.
  for (const double v : {1.0, 1.5, 3.0, 0.1, 3.0 * 1024, 1.0 + DBL_EPSILON, 1e-300, DBL_MIN / 4, -2.5, 0.0}) {
    for (const std::int64_t n : {1, 2, 5, 1000, 300001}) CHECK(repeated_sum(v, n) == loop_sum(v, n));
  }
  std::mt19937_64 rng(19);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-60, 60);
  std::uniform_int_distribution<std::int64_t> count(0, 200000);
  for (int i = 0; i < 300; ++i) {
    // Random mantissas, and some with few bits set (so that ties occur).
    double v = std::ldexp(mantissa(rng), exponent(rng));
    if (i % 3 == 0) v = std::ldexp(std::round(mantissa(rng) * 8) / 8, exponent(rng));
    const std::int64_t n = i % 2 == 0 ? count(rng) : count(rng) % 100;
    CHECK(repeated_sum(v, n) == loop_sum(v, n));
  }
}
