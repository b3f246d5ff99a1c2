#include "sim/repeated_sum.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace trainsim {

double repeated_sum(double v, std::int64_t n) {
  double s = 0;
  // Positive normal values whose sum stays far from overflow; anything else
  // (and the first addition, 0 + v = v) one addition at a time.
  const bool stepped = v >= DBL_MIN && v <= DBL_MAX / 4 && static_cast<double>(n) <= DBL_MAX / 4 / v;
  for (std::int64_t k = 0; k < n;) {
    if (!stepped || s == 0) {
      s += v;
      ++k;
      continue;
    }
    // s in [2^e, 2^(e+1)) is a multiple of its ulp u, and s >= v (every term
    // is v). While s + v stays below 2^(e+1), s + v rounds to s + D * u with D
    // = v / u rounded to an integer, the same D at every addition unless v / u
    // is a tie (x.5: the parity of s / u decides), which takes one addition at
    // a time. In units of u: S + j * D + v / u < 2^53 for j = 0 .. m - 1, i.e.
    // S + j * D + floor(v / u) <= 2^53 - 1.
    int exp = 0;
    std::frexp(s, &exp);
    const double u = std::ldexp(1.0, exp - 53);
    const double scaled = v / u;  // exact: a power-of-two scaling of a normal value
    const double q = std::floor(scaled), frac = scaled - q;
    if (frac == 0.5) {
      s += v;
      ++k;
      continue;
    }
    const auto big_s = static_cast<std::int64_t>(s / u);
    const auto d = static_cast<std::int64_t>(frac < 0.5 ? q : q + 1);
    if (d == 0) return s;  // v is below half an ulp of s: every later addition leaves s as it is
    const std::int64_t room = (std::int64_t{1} << 53) - 1 - big_s - static_cast<std::int64_t>(q);
    if (room < 0) {
      s += v;  // this addition leaves the binade: rounded at the next one's ulp
      ++k;
      continue;
    }
    const std::int64_t steps = std::min(room / d + 1, n - k);
    s = static_cast<double>(big_s + steps * d) * u;  // exact: at most 2^53 units of u
    k += steps;
  }
  return s;
}

}  // namespace trainsim
