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
  // Rounds to the nearest nanosecond; negative or NaN inputs are a caller bug.
  static Time seconds(double s) { return Time(static_cast<std::int64_t>(std::llround(s * 1e9))); }
  static constexpr Time max() { return Time(std::numeric_limits<std::int64_t>::max()); }

  constexpr std::int64_t count_ns() const { return ns_; }
  constexpr double to_seconds() const { return static_cast<double>(ns_) * 1e-9; }

  constexpr Time operator+(Time o) const { return Time(ns_ + o.ns_); }
  constexpr Time operator-(Time o) const { return Time(ns_ - o.ns_); }
  constexpr Time& operator+=(Time o) {
    ns_ += o.ns_;
    return *this;
  }
  constexpr auto operator<=>(const Time&) const = default;

 private:
  constexpr explicit Time(std::int64_t v) : ns_(v) {}
  std::int64_t ns_ = 0;
};

}  // namespace trainsim
