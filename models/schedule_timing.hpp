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

}  // namespace trainsim
