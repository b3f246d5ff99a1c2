#include "sim/metrics.hpp"

#include <algorithm>

namespace trainsim {

TimeBreakdown breakdown(const std::vector<Interval>& intervals, Time end) {
  struct Edge {
    Time t;
    int delta;
    std::uint8_t category;
  };
  std::vector<Edge> edges;
  edges.reserve(intervals.size() * 2 + 1);
  for (const Interval& iv : intervals) {
    edges.push_back(Edge{iv.start, +1, iv.category});
    edges.push_back(Edge{iv.end, -1, iv.category});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.t < b.t; });
  std::array<int, kWaitCategory + 1> active{};
  TimeBreakdown out;
  Time prev;
  auto attribute = [&](Time from, Time to) {
    if (to <= from) return;
    const double dt = (to - from).to_seconds();
    if (active[kComputeCategory] > 0) {
      out.compute_s += dt;
      return;
    }
    for (std::size_t c = 0; c < kNumCommClasses; ++c) {
      if (active[1 + c] > 0) {
        out.exposed_comm_s[c] += dt;
        return;
      }
    }
    if (active[kWaitCategory] > 0) {
      out.idle_s += dt;
    } else {
      out.bubble_s += dt;
    }
  };
  for (const Edge& e : edges) {
    attribute(prev, std::min(e.t, end));
    prev = std::max(prev, std::min(e.t, end));
    active[e.category] += e.delta;
  }
  attribute(prev, end);
  return out;
}

}  // namespace trainsim
