#include "sim/metrics.hpp"

#include <algorithm>

namespace trainsim {

namespace {

struct Edge {
  Time t;
  std::uint8_t category;
};

bool edge_before(const Edge& a, const Edge& b) { return a.t < b.t; }

// Sorts edges that are grouped into runs, each already in time order as a rule
// (one run per stream: a stream runs one task at a time), by merging the runs
// pairwise; a run out of order is sorted first, so any input sorts correctly.
void sort_runs(std::vector<Edge>& edges, std::vector<std::size_t>& bounds, std::vector<Edge>& scratch) {
  for (std::size_t r = 0; r + 1 < bounds.size(); ++r) {
    const auto first = edges.begin() + static_cast<std::ptrdiff_t>(bounds[r]);
    const auto last = edges.begin() + static_cast<std::ptrdiff_t>(bounds[r + 1]);
    if (!std::is_sorted(first, last, edge_before)) std::sort(first, last, edge_before);
  }
  scratch.resize(edges.size());
  std::vector<std::size_t> merged;
  while (bounds.size() > 2) {
    merged.clear();
    std::size_t r = 0;
    for (; r + 2 < bounds.size(); r += 2) {
      merged.push_back(bounds[r]);
      std::merge(edges.begin() + static_cast<std::ptrdiff_t>(bounds[r]),
                 edges.begin() + static_cast<std::ptrdiff_t>(bounds[r + 1]),
                 edges.begin() + static_cast<std::ptrdiff_t>(bounds[r + 1]),
                 edges.begin() + static_cast<std::ptrdiff_t>(bounds[r + 2]),
                 scratch.begin() + static_cast<std::ptrdiff_t>(bounds[r]), edge_before);
    }
    if (r + 1 < bounds.size()) {  // an odd run left over: copied as it is
      merged.push_back(bounds[r]);
      std::copy(edges.begin() + static_cast<std::ptrdiff_t>(bounds[r]),
                edges.begin() + static_cast<std::ptrdiff_t>(bounds[r + 1]),
                scratch.begin() + static_cast<std::ptrdiff_t>(bounds[r]));
    }
    merged.push_back(edges.size());
    edges.swap(scratch);
    bounds.swap(merged);
  }
}

// Attributes [prev, t) to what is active as the edges are visited in time
// order; the attribution of [prev, t) depends only on the edges before t, so
// the order among edges of one time does not matter.
class EdgeSweep {
 public:
  explicit EdgeSweep(Time end) : end_(end) {}
  void visit(Time t, std::uint8_t category, int delta) {
    attribute(prev_, std::min(t, end_));
    prev_ = std::max(prev_, std::min(t, end_));
    active_[category] += delta;
  }
  TimeBreakdown finish() {
    attribute(prev_, end_);
    return out_;
  }

 private:
  void attribute(Time from, Time to) {
    if (to <= from) return;
    const double dt = (to - from).to_seconds();
    if (active_[kComputeCategory] > 0) {
      out_.compute_s += dt;
      return;
    }
    for (std::size_t c = 0; c < kNumCommClasses; ++c) {
      if (active_[1 + c] > 0) {
        out_.exposed_comm_s[c] += dt;
        return;
      }
    }
    if (active_[kWaitCategory] > 0) {
      out_.idle_s += dt;
    } else {
      out_.bubble_s += dt;
    }
  }
  Time end_, prev_;
  std::array<int, kWaitCategory + 1> active_{};
  TimeBreakdown out_;
};

}  // namespace

// Edges are visited in time order. Ends are recorded in time order by the
// executor (an interval is recorded when it ends) and starts in time order per
// stream: merging those runs gives the order a full sort would, at a fraction
// of its cost (a run out of order is sorted first).
TimeBreakdown breakdown(const std::vector<Interval>& intervals, Time end) {
  std::vector<Edge> starts(intervals.size()), ends(intervals.size()), scratch;
  std::vector<std::size_t> bounds;
  {
    std::size_t per_stream[256] = {};
    for (const Interval& iv : intervals) ++per_stream[iv.stream];
    std::size_t at = 0;
    for (std::size_t& n : per_stream) {
      const std::size_t count = n;
      n = at;
      if (count > 0) bounds.push_back(at);
      at += count;
    }
    bounds.push_back(at);
    for (std::size_t i = 0; i < intervals.size(); ++i) {
      const Interval& iv = intervals[i];
      starts[per_stream[iv.stream]++] = Edge{iv.start, iv.category};
      ends[i] = Edge{iv.end, iv.category};
    }
  }
  sort_runs(starts, bounds, scratch);
  if (!std::is_sorted(ends.begin(), ends.end(), edge_before)) std::sort(ends.begin(), ends.end(), edge_before);
  EdgeSweep sweep(end);
  std::size_t s = 0, e = 0;
  while (s < starts.size() || e < ends.size()) {
    if (e == ends.size() || (s < starts.size() && starts[s].t <= ends[e].t)) {
      sweep.visit(starts[s].t, starts[s].category, +1);
      ++s;
    } else {
      sweep.visit(ends[e].t, ends[e].category, -1);
      ++e;
    }
  }
  return sweep.finish();
}

}  // namespace trainsim
