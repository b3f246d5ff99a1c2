#pragma once
// Pipeline schedules as the order in which one pipeline rank runs its work
// units: forward or backward of (micro-batch, virtual chunk).
#include <vector>

#include "models/training_spec.hpp"

namespace trainsim {

struct WorkUnit {
  bool forward = true;
  int microbatch = 0;
  int chunk = 0;  // virtual stage index on this rank (0 unless interleaved)
};

// Order of work on pipeline rank `stage` of `pp` with `m` micro-batches and
// `vpp` chunks per rank. Interleaved 1F1B follows Megatron-LM's ordering and
// needs m % pp == 0 (checked at scenario loading).
std::vector<WorkUnit> pipeline_order(ScheduleKind kind, int stage, int pp, int m, int vpp);

// Micro-batches whose activations a rank holds at once under the schedule
// (in units of one chunk's activations).
int max_inflight_chunks(ScheduleKind kind, int stage, int pp, int m, int vpp);

}  // namespace trainsim
