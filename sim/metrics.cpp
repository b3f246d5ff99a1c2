#include "sim/metrics.hpp"

#include "sim/check.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <vector>

namespace trainsim {

namespace {

struct Edge {
  Time t;
  std::uint8_t category;
  std::uint32_t interval = 0;  // kBlockCategory: the block's interval
};
// Marks a start in Edge::category where starts and ends share one array.
constexpr std::uint8_t kStartBit = 0x80;

bool edge_before(const Edge& a, const Edge& b) { return a.t < b.t; }

// Sorts edges that are grouped into runs, each already in time order as a rule
// (one run per stream: a stream runs one task at a time), by merging the runs
// two at a time, the two shortest first (a stream of pipeline transfers holds
// a few dozen edges, the compute stream thousands: each long run is copied
// about once instead of once per round of pairwise merges); a run out of
// order is sorted first, so any input sorts correctly. Edges of one time may
// come out in another order than a full sort's: the sweep does not depend on
// it (EdgeSweep). Returns the sorted edges (in `edges` or in `merged`).
std::span<const Edge> sort_runs(std::vector<Edge>& edges, const std::vector<std::size_t>& bounds,
                                std::vector<std::vector<Edge>>& merged) {
  std::vector<std::span<Edge>> runs;
  for (std::size_t r = 0; r + 1 < bounds.size(); ++r) {
    const std::span<Edge> run(edges.data() + bounds[r], bounds[r + 1] - bounds[r]);
    if (run.empty()) continue;
    if (!std::is_sorted(run.begin(), run.end(), edge_before)) std::sort(run.begin(), run.end(), edge_before);
    runs.push_back(run);
  }
  if (runs.empty()) return {};
  merged.reserve(runs.size());
  while (runs.size() > 1) {
    std::size_t a = 0, b = 1;  // the two shortest runs, a the shorter
    if (runs[b].size() < runs[a].size()) std::swap(a, b);
    for (std::size_t r = 2; r < runs.size(); ++r) {
      if (runs[r].size() < runs[a].size()) {
        b = a;
        a = r;
      } else if (runs[r].size() < runs[b].size()) {
        b = r;
      }
    }
    std::vector<Edge>& out = merged.emplace_back(runs[a].size() + runs[b].size());
    std::merge(runs[a].begin(), runs[a].end(), runs[b].begin(), runs[b].end(), out.begin(), edge_before);
    runs[std::min(a, b)] = out;
    runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(std::max(a, b)));
  }
  return runs.front();
}

// Attributes [prev, t) to what is active as the edges are visited in time
// order; the attribution of [prev, t) depends only on the edges before t, so
// the order among edges of one time does not matter. Durations are summed in
// whole nanoseconds and converted once: the sums are exact, so splitting an
// interval in two touching ones of its category changes nothing.
class EdgeSweep {
 public:
  EdgeSweep(Time end, const std::vector<Interval>& intervals, std::span<const IntervalBlock> blocks)
      : end_(end), intervals_(intervals), blocks_(blocks) {}
  void visit(Time t, std::uint8_t category, int delta) {
    attribute(prev_, std::min(t, end_));
    prev_ = std::max(prev_, std::min(t, end_));
    active_[category] += delta;
  }
  // Interval `i`, a block: what came before it is attributed, then its sums,
  // and nothing inside it (edges there only change what is active).
  void claim(std::uint32_t i) {
    const Interval& iv = intervals_[i];
    TRAINSIM_CHECK(iv.task < blocks_.size() && iv.end <= end_ && prev_ <= iv.start,
                   "a timeline's block is unknown, ends past the breakdown's end or lies inside another block");
    attribute(prev_, iv.start);
    const IntervalBlock& b = blocks_[iv.task];
    for (std::size_t k = 0; k < ns_.size(); ++k) ns_[k] += b.ns[k];
    prev_ = iv.end;
  }
  // An edge of the sorted lists: a block's start claims it, its end changes nothing.
  void visit_edge(const Edge& e, bool start) {
    if (e.category == kBlockCategory) {
      if (start) claim(e.interval);
      return;
    }
    visit(e.t, e.category, start ? +1 : -1);
  }
  PartSums sums() {
    attribute(prev_, end_);
    prev_ = end_;
    PartSums out{ns_, 0};
    for (std::size_t k = 0; k < ns_.size(); ++k) {
      if (ns_[k] > 0) out.weakest = static_cast<std::uint8_t>(k);
    }
    return out;
  }
  TimeBreakdown finish() {
    attribute(prev_, end_);
    TimeBreakdown out;
    out.compute_s = Time::ns(ns_[kCompute]).to_seconds();
    for (std::size_t c = 0; c < kNumCommClasses; ++c) out.exposed_comm_s[c] = Time::ns(ns_[1 + c]).to_seconds();
    out.idle_s = Time::ns(ns_[kIdle]).to_seconds();
    out.bubble_s = Time::ns(ns_[kBubble]).to_seconds();
    return out;
  }

 private:
  // Sums: compute, each communication class, idle (waiting at a rendezvous), bubble.
  static constexpr std::size_t kCompute = 0, kIdle = 1 + kNumCommClasses, kBubble = kIdle + 1;
  void attribute(Time from, Time to) {
    if (to <= from) return;
    const std::int64_t dt = (to - from).count_ns();
    if (active_[kComputeCategory] > 0) {
      ns_[kCompute] += dt;
      return;
    }
    for (std::size_t c = 0; c < kNumCommClasses; ++c) {
      if (active_[1 + c] > 0) {
        ns_[1 + c] += dt;
        return;
      }
    }
    ns_[active_[kWaitCategory] > 0 ? kIdle : kBubble] += dt;
  }
  static_assert(kBubble + 1 == kBreakdownParts);
  Time end_, prev_;
  const std::vector<Interval>& intervals_;
  std::span<const IntervalBlock> blocks_;
  std::array<int, kWaitCategory + 1> active_{};
  std::array<std::int64_t, kBreakdownParts> ns_{};
};

// The general path. Edges are visited in time order. Ends are recorded in time
// order by the executor (an interval is recorded when it ends) and starts in
// time order per stream: merging those runs gives a full sort's order (up to
// the order among edges of one time, which the sweep ignores) at a fraction of
// its cost (a run out of order is sorted first).
// Returns the sweep with every edge visited (finish() or sums() closes it).
EdgeSweep sweep_by_edges(const std::vector<Interval>& intervals, std::span<const IntervalBlock> blocks, Time end) {
  std::vector<Edge> starts_by_stream(intervals.size()), ends(intervals.size());
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
      const auto index = static_cast<std::uint32_t>(i);
      starts_by_stream[per_stream[iv.stream]++] = Edge{iv.start, iv.category, index};
      ends[i] = Edge{iv.end, iv.category, index};
    }
  }
  std::vector<std::vector<Edge>> merged;
  const std::span<const Edge> starts = sort_runs(starts_by_stream, bounds, merged);
  if (!std::is_sorted(ends.begin(), ends.end(), edge_before)) std::sort(ends.begin(), ends.end(), edge_before);
  EdgeSweep sweep(end, intervals, blocks);
  std::size_t s = 0, e = 0;
  while (s < starts.size() || e < ends.size()) {
    if (e == ends.size() || (s < starts.size() && starts[s].t <= ends[e].t)) {
      sweep.visit_edge(starts[s], true);
      ++s;
    } else {
      sweep.visit_edge(ends[e], false);
      ++e;
    }
  }
  return sweep;
}

// The usual case: on each stream the intervals, in the order recorded, follow
// one another (a stream runs one task at a time), and one stream (the compute
// stream) holds most of them. Its edges (start, end, next start, ...) are then
// in time order as they lie, and only the other streams' edges are sorted; the
// two runs are merged as they are visited. The sweep sees the same segments in
// the same order as on the general path (only the order among edges of one
// time differs, which it ignores), so every sum is the same to the bit.
// nullopt when some stream's intervals overlap or come out of order.
std::optional<EdgeSweep> sweep_by_streams(const std::vector<Interval>& intervals, std::span<const IntervalBlock> blocks,
                                          Time end) {
  std::array<std::uint32_t, 256> count{};
  std::array<Time, 256> last_end{};
  for (const Interval& iv : intervals) {
    if (iv.end < iv.start || (count[iv.stream] > 0 && iv.start < last_end[iv.stream])) return std::nullopt;
    ++count[iv.stream];
    last_end[iv.stream] = iv.end;
  }
  const auto main =
      static_cast<std::uint8_t>(std::max_element(count.begin(), count.end()) - count.begin());  // the busiest stream
  // The other streams' edges, stream by stream (each stream's already in
  // time order), merged into one run.
  std::vector<Edge> by_stream(2 * (intervals.size() - count[main]));
  std::vector<std::size_t> bounds;
  {
    std::array<std::size_t, 256> at{};
    std::size_t total = 0;
    for (std::size_t st = 0; st < count.size(); ++st) {
      if (st == main || count[st] == 0) continue;
      bounds.push_back(total);
      at[st] = total;
      total += 2 * static_cast<std::size_t>(count[st]);
    }
    bounds.push_back(total);
    for (std::size_t i = 0; i < intervals.size(); ++i) {
      const Interval& iv = intervals[i];
      if (iv.stream == main) continue;
      std::size_t& k = at[iv.stream];
      const auto index = static_cast<std::uint32_t>(i);
      by_stream[k++] = Edge{iv.start, static_cast<std::uint8_t>(iv.category | kStartBit), index};
      by_stream[k++] = Edge{iv.end, iv.category, index};
    }
  }
  std::vector<std::vector<Edge>> merged;
  const std::span<const Edge> others = sort_runs(by_stream, bounds, merged);
  EdgeSweep sweep(end, intervals, blocks);
  std::size_t o = 0;
  auto visit_others_until = [&](Time t, bool through) {
    while (o < others.size() && (others[o].t < t || (through && others[o].t == t))) {
      const Edge& e = others[o++];
      sweep.visit_edge(Edge{e.t, static_cast<std::uint8_t>(e.category & ~kStartBit), e.interval},
                       (e.category & kStartBit) != 0);
    }
  };
  for (std::size_t i = 0; i < intervals.size(); ++i) {
    const Interval& iv = intervals[i];
    if (iv.stream != main) continue;
    visit_others_until(iv.start, true);
    if (iv.category == kBlockCategory) {
      sweep.claim(static_cast<std::uint32_t>(i));
    } else {
      sweep.visit(iv.start, iv.category, +1);
    }
    visit_others_until(iv.end, true);
    if (iv.category != kBlockCategory) sweep.visit(iv.end, iv.category, -1);
  }
  visit_others_until(Time::max(), true);
  return sweep;
}

}  // namespace

TimeBreakdown breakdown(const std::vector<Interval>& intervals, Time end) { return breakdown(intervals, {}, end); }

TimeBreakdown breakdown(const std::vector<Interval>& intervals, std::span<const IntervalBlock> blocks, Time end) {
  if (std::optional<EdgeSweep> s = sweep_by_streams(intervals, blocks, end)) return s->finish();
  return sweep_by_edges(intervals, blocks, end).finish();
}

TimeBreakdown breakdown_sorting_edges(const std::vector<Interval>& intervals, Time end) {
  return sweep_by_edges(intervals, {}, end).finish();
}

PartSums part_sums(const std::vector<Interval>& intervals, Time end) {
  if (std::optional<EdgeSweep> s = sweep_by_streams(intervals, {}, end)) return s->sums();
  return sweep_by_edges(intervals, {}, end).sums();
}

}  // namespace trainsim
