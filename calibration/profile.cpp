#include "calibration/profile.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace trainsim {

EfficiencyCurve::EfficiencyCurve(std::vector<std::pair<double, double>> points) : points_(std::move(points)) {
  log_sizes_.reserve(points_.size());
  for (const auto& [size, efficiency] : points_) log_sizes_.push_back(std::log(size));
}

double EfficiencyCurve::at(double size) const {
  if (points_.empty()) return 1.0;
  if (size <= points_.front().first) return points_.front().second;
  if (size >= points_.back().first) return points_.back().second;
  const auto hi =
      std::upper_bound(points_.begin(), points_.end(), size, [](double s, const auto& p) { return s < p.first; });
  const auto lo = hi - 1;
  const double log_lo = log_sizes_[static_cast<std::size_t>(lo - points_.begin())];
  const double log_hi = log_sizes_[static_cast<std::size_t>(hi - points_.begin())];
  const double t = (std::log(size) - log_lo) / (log_hi - log_lo);
  return lo->second + t * (hi->second - lo->second);
}

}  // namespace trainsim
