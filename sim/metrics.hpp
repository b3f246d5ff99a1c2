#pragma once
// Where a rank's time went: compute, communication not hidden behind compute
// (per parallelism), waiting at collectives for slower ranks (idle), and time
// with nothing to do (pipeline bubble). The parts add up to the makespan.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/executor.hpp"

namespace trainsim {

struct TimeBreakdown {
  double compute_s = 0;
  std::array<double, kNumCommClasses> exposed_comm_s{};  // indexed by CommClass
  double bubble_s = 0;
  double idle_s = 0;
};

// Attributes [0, end) of one timeline: compute wins over communication; among
// overlapping transfers the first CommClass in enum order (TP, CP, EP, PP, DP)
// counts; rendezvous waits count as idle; nothing at all counts as bubble.
// Each part is a sum of whole nanoseconds, converted once: exact, so the parts
// do not depend on how a stream's busy time is cut into intervals.
TimeBreakdown breakdown(const std::vector<Interval>& intervals, Time end);
// The same over a timeline whose intervals may name blocks (kBlockCategory):
// each adds its sums, and nothing else counts inside it.
TimeBreakdown breakdown(const std::vector<Interval>& intervals, std::span<const IntervalBlock> blocks, Time end);
inline TimeBreakdown breakdown(const RankTimeline& timeline, Time end) {
  return breakdown(timeline.intervals, timeline.blocks, end);
}

// The whole nanoseconds a breakdown of [0, end) gives each part (indexed as
// IntervalBlock::ns), and the last part that gets any: what a block of these
// intervals carries.
struct PartSums {
  std::array<std::int64_t, kBreakdownParts> ns{};
  std::uint8_t weakest = 0;
};
PartSums part_sums(const std::vector<Interval>& intervals, Time end);

// The same by sorting every start and end, for intervals in any order (what
// breakdown does when a stream's intervals overlap or come out of order);
// tests compare the two.
TimeBreakdown breakdown_sorting_edges(const std::vector<Interval>& intervals, Time end);

}  // namespace trainsim
