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

// Any order of intervals: the starts grouped by stream, each run sorted if it
// is not, the runs merged, the ends sorted if they are not.
TimeBreakdown breakdown_of_any_order(const std::vector<Interval>& intervals, Time end) {
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

}  // namespace

// Edges are visited in time order. Ends are recorded in time order by the
// executor (an interval is recorded when it ends) and starts in time order
// per stream: the streams' runs of starts and the run of ends are merged as
// they are visited, without copying an edge. Input in another order takes
// breakdown_of_any_order, which sorts what is out of order first.
TimeBreakdown breakdown(const std::vector<Interval>& intervals, Time end) {
  constexpr std::uint32_t kNone = ~std::uint32_t{0};
  const auto n = static_cast<std::uint32_t>(intervals.size());
  // The next interval of the same stream, and each stream's first and last.
  std::vector<std::uint32_t> next(n, kNone);
  std::uint32_t first[256], last[256];
  std::fill(std::begin(first), std::end(first), kNone);
  std::uint8_t streams[256];
  std::size_t num_streams = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const Interval& iv = intervals[i];
    if (i > 0 && iv.end < intervals[i - 1].end) return breakdown_of_any_order(intervals, end);
    const std::uint8_t s = iv.stream;
    if (first[s] == kNone) {
      first[s] = i;
      streams[num_streams++] = s;
    } else {
      if (iv.start < intervals[last[s]].start) return breakdown_of_any_order(intervals, end);
      next[last[s]] = i;
    }
    last[s] = i;
  }
  // The head of each unfinished stream's run and its start time (a finished
  // run leaves the list: the order among streams does not matter).
  std::uint32_t head[256];
  Time head_t[256];
  for (std::size_t k = 0; k < num_streams; ++k) {
    head[k] = first[streams[k]];
    head_t[k] = intervals[head[k]].start;
  }
  EdgeSweep sweep(end);
  std::uint32_t e = 0;
  for (std::uint32_t visited = 0; visited < n;) {
    std::size_t k = 0;
    for (std::size_t j = 1; j < num_streams; ++j) k = head_t[j] < head_t[k] ? j : k;
    if (e == n || head_t[k] <= intervals[e].end) {
      const Interval& iv = intervals[head[k]];
      sweep.visit(iv.start, iv.category, +1);
      head[k] = next[head[k]];
      if (head[k] == kNone) {
        --num_streams;
        head[k] = head[num_streams];
        head_t[k] = head_t[num_streams];
      } else {
        head_t[k] = intervals[head[k]].start;
      }
      ++visited;
    } else {
      sweep.visit(intervals[e].end, intervals[e].category, -1);
      ++e;
    }
  }
  for (; e < n; ++e) sweep.visit(intervals[e].end, intervals[e].category, -1);
  return sweep.finish();
}

}  // namespace trainsim
