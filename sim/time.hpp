#pragma once
// Simulated time: a strong type over integer nanoseconds, so that event order
// (and therefore every result) is exact and repeatable on every machine.
#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

namespace trainsim {

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time ns(std::int64_t v) { return Time(v); }
  // Rounds to the nearest nanosecond; negative inputs are a caller bug. A duration
  // beyond the clock's range, or NaN, saturates at saturated() (about 146 years).
  static Time seconds(double s) {
    const double ns = s * 1e9;
    if (!(ns < static_cast<double>(kSaturatedNs))) return Time(kSaturatedNs);
    return Time(static_cast<std::int64_t>(std::llround(ns)));
  }
  // The time every overflowing duration or sum stops at: a run that reaches it is
  // refused by the job (docs/limits.md), never reported with wrapped figures.
  static constexpr Time saturated() { return Time(kSaturatedNs); }
  static constexpr Time max() { return Time(std::numeric_limits<std::int64_t>::max()); }

  constexpr std::int64_t count_ns() const { return ns_; }
  constexpr double to_seconds() const { return static_cast<double>(ns_) * 1e-9; }

  // Sums stop at saturated() instead of wrapping; max() ("never") stays max().
  constexpr Time operator+(Time o) const {
    std::int64_t r = 0;
    if (__builtin_add_overflow(ns_, o.ns_, &r) || r > kSaturatedNs) {
      return ns_ == max().ns_ || o.ns_ == max().ns_ ? max() : saturated();
    }
    return Time(r);
  }
  constexpr Time operator-(Time o) const { return Time(ns_ - o.ns_); }
  constexpr Time& operator+=(Time o) { return *this = *this + o; }
  constexpr auto operator<=>(const Time&) const = default;

 private:
  static constexpr std::int64_t kSaturatedNs = std::int64_t{1} << 62;
  constexpr explicit Time(std::int64_t v) : ns_(v) {}
  std::int64_t ns_ = 0;
};

}  // namespace trainsim
