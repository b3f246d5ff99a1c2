#include "calibration/profile.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
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

double TritonAttentionSpeed::at(bool backward, int head_dim, bool causal, double seq) const {
  const bool any_causal =
      std::any_of(shapes.begin(), shapes.end(), [&](const TritonAttentionShape& c) { return c.causal == causal; });
  const TritonAttentionShape* best = nullptr;
  for (const TritonAttentionShape& c : shapes) {
    if (any_causal && c.causal != causal) continue;
    if (best == nullptr || std::abs(c.head_dim - head_dim) < std::abs(best->head_dim - head_dim) ||
        (std::abs(c.head_dim - head_dim) == std::abs(best->head_dim - head_dim) && c.head_dim < best->head_dim)) {
      best = &c;
    }
  }
  if (best == nullptr) return 0;
  return backward ? best->backward.at(seq) : best->forward.at(seq);
}

}  // namespace trainsim
