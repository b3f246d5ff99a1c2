#pragma once
// The Zero Bubble automatic scheduler (Qi et al., "Zero Bubble (Almost)
// Pipeline Parallelism", ICLR 2024, arXiv:2401.10241, Section 3.1): given the
// per-pass times T_F, T_B, T_W, T_comm and a memory limit, the fastest
// schedule that fits. ZB-1p: a limit of p micro-batches' activations, ZB-2p: 2p.
#include "models/schedule.hpp"
#include "models/schedule_timing.hpp"

namespace trainsim {

// Searches the Zero Bubble family (zero_bubble_family: warmup forwards and
// W deferral per rank) on the unit-level timing model and returns the
// schedule with the shortest makespan whose peak activations on every rank
// stay within `memory_limit` micro-batches. A micro-batch holds 1 from F to B
// and `weight_input_fraction` from B to W (the inputs of the weight-gradient
// GEMMs). Ties go to less memory, then to fewer extra forwards.
PipelineSchedule zero_bubble_auto_schedule(int pp, int m, const PassTimes& times, double memory_limit,
                                           double weight_input_fraction);

// The Zero Bubble runtime's own scheduler for ZB-1p and ZB-2p where it does
// not solve its ILP (3 p m >= 500 passes; `auto_schedule` in
// megatron/core/pipeline_parallel/auto_schedule.py of
// github.com/sail-sg/zero-bubble-pipeline-parallelism, commit ed85b11):
// `initial_solution` builds the schedule greedily (`Graph.manual_order`) in its
// eight variants and keeps the one whose longest rank span (first F start to
// last W end) is shortest, the first on a tie. Pass times are taken in whole
// microseconds, as the runtime passes them; a micro-batch's activations count
// 2 from F, -1 at B and -1 at W against a limit of 2 x `max_pending_backward`
// (p for ZB-1p, 2p for ZB-2p). A variant that runs out of memory is skipped
// (the runtime would raise). Each rank's units in the order they were placed.
PipelineSchedule zero_bubble_runtime_schedule(int pp, int m, const PassTimes& times, int max_pending_backward);

// Whether the Zero Bubble runtime schedules p ranks and m micro-batches with
// its heuristic (true) or its ILP (3 p m < 500 passes).
bool zero_bubble_runtime_uses_heuristic(int pp, int m);

}  // namespace trainsim
