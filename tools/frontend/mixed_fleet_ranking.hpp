#pragma once
// The mixed-fleet search ranked by the simulator itself: every candidate of
// models/mixed_fleet_search.hpp run on the scenario, fastest first, each with
// how much faster (or slower) it is than the best plan that treats every GPU
// alike on the same cluster (docs/heterogeneous.md).
#include <vector>

#include "models/mixed_fleet_search.hpp"
#include "sim/platform.hpp"
#include "tools/frontend/scenario.hpp"

namespace trainsim {

struct RankedPlan {
  ParallelSpec par;
  bool homogeneous = false;
  double iteration_time_s = 0;
  // best homogeneous iteration time / this plan's (> 1: faster than every homogeneous plan)
  double speedup_vs_homogeneous = 0;
};

struct MixedFleetRanking {
  MixedFleetSearchResult search;
  std::vector<RankedPlan> plans;  // feasible plans, fastest first (ties: enumeration order)
  double best_homogeneous_s = 0;  // 0 when no homogeneous plan fits
  std::size_t infeasible = 0;     // simulated but infeasible (deadlock, clock limit)
};

// Ranks the plans of `base`'s model, training and cluster (its parallel section
// gives global_batch and the settings every plan keeps).
MixedFleetRanking rank_mixed_fleet(const Scenario& base, const MixedFleetSearchSpace& space,
                                   Fidelity fidelity = Fidelity::Analytical);

}  // namespace trainsim
