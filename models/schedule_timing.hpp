#pragma once
// The unit-level timing of a pipeline schedule: every forward, backward-input
// and backward-weight pass of a chunk takes a fixed time, a message between
// ranks a fixed latency. The model the Zero Bubble paper (Qi et al., ICLR
// 2024, arXiv:2401.10241, Section 3) reasons with; closed-form bubbles and
// schedule comparisons are checked on it, without the full cost model.
#include <vector>

#include "models/training_spec.hpp"

namespace trainsim {

// Time of one pass through one chunk, and of one pipeline message (T_comm).
struct PassTimes {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
  double transfer = 0;
};

// Per rank: the time it computes, its first start and its last end.
struct ScheduleTiming {
  double makespan = 0;
  std::vector<double> busy, first_start, last_end;
  // Per rank, the end of each of its units (in its order; an overlapped pair's
  // two units end together); per chunk v and micro-batch mb (v * m + mb), the
  // end of its forward and of its input gradient.
  std::vector<std::vector<double>> unit_end, unit_start;
  std::vector<double> forward_end, input_grad_end;
  // The paper's bubble rate: (makespan - busy) / makespan of the busiest rank.
  double bubble_rate() const;
  // The largest idle share of one rank's own span (first start to last end):
  // the bubble when iterations overlap, each rank starting the next one as
  // soon as it is done (no step-wide synchronisation), as the Zero Bubble
  // paper counts it for ZB-H2, ZB-2p and ZB-V (its Tables 6-8).
  double span_bubble_rate() const;
};

// Runs the schedule's units in order on each rank, each as soon as its input
// exists (a whole backward takes B + W). The schedule must pass check_schedule.
ScheduleTiming time_schedule(const PipelineSchedule& schedule, const PassTimes& times);

// Where the Zero Bubble runtime posts each receive (`reorder_communication` in
// megatron/core/pipeline_parallel/auto_schedule.py, github.com/sail-sg/
// zero-bubble-pipeline-parallelism): a receive is timed at its sender's
// predicted completion and goes before the first unit of the receiver that
// ends at or after it. With `sorted` (the runtime's first commit, ed85b11,
// where that move before the overlapping pass is commented out) it goes
// before the first unit that starts at or after it: among the passes sorted
// by start time, a transfer before a pass of the same time. Per rank and
// unit: the index of the unit after which the unit's input receive is posted,
// -1 before the rank's first unit or when the input comes from the rank itself.
std::vector<std::vector<int>> receive_posts(const PipelineSchedule& schedule, const PassTimes& times,
                                            bool sorted = false);

}  // namespace trainsim
