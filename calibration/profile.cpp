#include "calibration/profile.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace trainsim {

EfficiencyCurve::EfficiencyCurve(std::vector<std::pair<double, double>> points) : points_(std::move(points)) {}

double EfficiencyCurve::at(double size) const {
  if (points_.empty()) return 1.0;
  if (size <= points_.front().first) return points_.front().second;
  if (size >= points_.back().first) return points_.back().second;
  const auto hi =
      std::upper_bound(points_.begin(), points_.end(), size, [](double s, const auto& p) { return s < p.first; });
  const auto lo = hi - 1;
  const double t = (std::log(size) - std::log(lo->first)) / (std::log(hi->first) - std::log(lo->first));
  return lo->second + t * (hi->second - lo->second);
}

}  // namespace trainsim
