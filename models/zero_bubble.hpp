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

}  // namespace trainsim
