#include "tools/frontend/mixed_fleet_ranking.hpp"

#include <algorithm>

#include "tools/frontend/job.hpp"

namespace trainsim {

MixedFleetRanking rank_mixed_fleet(const Scenario& base, const MixedFleetSearchSpace& space, Fidelity fidelity) {
  MixedFleetRanking out;
  std::vector<double> capacity;
  for (const auto& g : base.cluster.groups) {
    double reserved = 0;
    for (const auto& p : base.profiles) {
      if (p.gpu == g.node.gpu.name) reserved = p.memory_reserved.value;
    }
    capacity.push_back(g.node.gpu.memory_bytes - reserved);
  }
  out.search = search_mixed_fleet(base.model, base.training, base.cluster, base.parallel, capacity, space);
  for (const MixedFleetCandidate& c : out.search.candidates) {
    Scenario s = base;
    s.parallel = c.par;
    const JobReport r = simulate(s, fidelity);
    if (!r.feasible || r.iteration_time_s <= 0) {
      ++out.infeasible;
      continue;
    }
    out.plans.push_back(RankedPlan{c.par, c.homogeneous, r.iteration_time_s, 0});
    if (c.homogeneous && (out.best_homogeneous_s == 0 || r.iteration_time_s < out.best_homogeneous_s))
      out.best_homogeneous_s = r.iteration_time_s;
  }
  std::stable_sort(out.plans.begin(), out.plans.end(),
                   [](const RankedPlan& a, const RankedPlan& b) { return a.iteration_time_s < b.iteration_time_s; });
  for (RankedPlan& p : out.plans) {
    if (out.best_homogeneous_s > 0) p.speedup_vs_homogeneous = out.best_homogeneous_s / p.iteration_time_s;
  }
  return out;
}

}  // namespace trainsim
