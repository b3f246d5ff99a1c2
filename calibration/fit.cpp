#include "calibration/fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace trainsim {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double round_significant(double x, int digits) {
  if (x == 0 || !std::isfinite(x)) return x;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return std::strtod(buf, nullptr);  // the double nearest the decimal text
}

std::vector<FitPoint> bucket_medians(const std::vector<std::pair<double, double>>& samples) {
  std::map<long, std::pair<std::vector<double>, std::vector<double>>> buckets;
  for (const auto& [x, y] : samples) {
    auto& b = buckets[std::lround(std::log2(x))];
    b.first.push_back(std::log2(x));
    b.second.push_back(y);
  }
  std::vector<FitPoint> out;
  for (const auto& [key, b] : buckets) {
    out.push_back({std::exp2(median(b.first)), median(b.second), static_cast<double>(b.first.size())});
  }
  return out;
}

void make_non_decreasing(std::vector<FitPoint>& pts) {
  struct Block {
    double sum, weight;
    std::size_t first, last;
  };
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    blocks.push_back({pts[i].y * pts[i].w, pts[i].w, i, i});
    while (blocks.size() > 1) {
      const Block& b = blocks.back();
      const Block& a = blocks[blocks.size() - 2];
      if (a.sum / a.weight <= b.sum / b.weight) break;
      const Block merged{a.sum + b.sum, a.weight + b.weight, a.first, b.last};
      blocks.pop_back();
      blocks.back() = merged;
    }
  }
  for (const Block& b : blocks) {
    for (std::size_t i = b.first; i <= b.last; ++i) pts[i].y = b.sum / b.weight;
  }
}

EfficiencyCurve to_curve(const std::vector<FitPoint>& pts) {
  std::vector<std::pair<double, double>> v;
  for (const FitPoint& p : pts) v.emplace_back(p.x, p.y);
  return EfficiencyCurve(std::move(v));
}

std::vector<FitPoint> finish_points(std::vector<FitPoint> pts, bool integer_sizes, double cap) {
  std::vector<FitPoint> out;
  for (FitPoint p : pts) {
    p.x = integer_sizes ? std::max(1.0, std::round(p.x)) : round_significant(p.x, 4);
    p.y = std::clamp(round_significant(p.y, 4), 1e-4, cap);
    if (!out.empty() && p.x <= out.back().x) continue;
    out.push_back(p);
  }
  return out;
}

std::optional<StepLatencyFit> fit_step_latency(const std::vector<std::pair<double, double>>& st) {
  double ms = 0, mt = 0;
  for (const auto& [s, t] : st) {
    ms += s / st.size();
    mt += t / st.size();
  }
  double var = 0, cov = 0;
  for (const auto& [s, t] : st) {
    var += (s - ms) * (s - ms);
    cov += (s - ms) * (t - mt);
  }
  if (var > 0) {
    double hop = cov / var, base_lat = mt - hop * ms;
    if (hop < 0) {
      hop = 0;
      base_lat = mt;
    } else if (base_lat < 0) {
      double sst = 0, ss = 0;
      for (const auto& [s, t] : st) {
        sst += s * t;
        ss += s * s;
      }
      base_lat = 0;
      hop = sst / ss;
    }
    return StepLatencyFit{hop, base_lat};
  }
  return std::nullopt;
}

}  // namespace trainsim
