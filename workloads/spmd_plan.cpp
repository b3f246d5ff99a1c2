#include "workloads/spmd_plan.hpp"

#include <algorithm>
#include <cmath>

#include "sim/check.hpp"

namespace trainsim {

void plan_spmd(SpmdRanks ranks, const Placement& placement, WorkloadPlan& plan) {
  const int n = static_cast<int>(ranks.program_of_rank.size());
  TRAINSIM_CHECK(n == placement.ranks(), "one program per placed rank");
  std::vector<int> members(n);
  for (int r = 0; r < n; ++r) members[r] = placement.gpu(RankCoord{0, 0, 0, r, 0});
  plan.setup.programs = std::move(ranks.programs);
  plan.setup.comms.push_back(Communicator{"all " + ranks.rank_label + "s", members, n});
  for (std::size_t i = 0; i < ranks.subgroups.size(); ++i) {
    std::vector<int> gpus;
    for (int r : ranks.subgroups[i]) gpus.push_back(members[r]);
    const int size = static_cast<int>(gpus.size());
    plan.setup.comms.push_back(Communicator{ranks.rank_label + " group " + std::to_string(i), std::move(gpus), size});
  }
  for (int r = 0; r < n; ++r) {
    RankProgram rp;
    rp.program = static_cast<std::uint32_t>(ranks.program_of_rank[r]);
    rp.gpu = members[r];
    rp.name = ranks.rank_label + " " + std::to_string(r) + " (gpu " + std::to_string(rp.gpu) + ")";
    rp.record = r == 0;
    rp.comm_of_slot.assign(plan.setup.programs[rp.program].comm_slots.size(), 0);
    if (static_cast<std::size_t>(r) < ranks.subgroup_of_slot.size()) {
      const std::vector<int>& bound = ranks.subgroup_of_slot[r];
      for (std::size_t s = 0; s < bound.size() && s < rp.comm_of_slot.size(); ++s) {
        if (bound[s] >= 0) rp.comm_of_slot[s] = static_cast<std::uint32_t>(1 + bound[s]);
      }
    }
    plan.setup.ranks.push_back(std::move(rp));
    plan.stage_of_rank.push_back(0);
  }
  plan.recorded_rank_of_stage = {0};
  StagePlan stage;
  stage.layers = 1;
  // Memory: the rank holding the most (its program's breakdown).
  for (const MemoryBreakdown& m : ranks.memory_of_program) {
    if (m.total() > stage.memory.total()) stage.memory = m;
  }
  plan.stages = {stage};
}

ComputeOp gemm_op(const std::string& name, double m, double n, double k, Dtype dtype) {
  ComputeOp op;
  op.name = name;
  op.kind = OpKind::Gemm;
  op.dtype = dtype;
  op.m = static_cast<std::int64_t>(std::llround(m));
  op.n = static_cast<std::int64_t>(std::llround(n));
  op.k = static_cast<std::int64_t>(std::llround(k));
  op.flops = 2 * m * n * k;
  const double b = static_cast<double>(bytes_per_element(dtype));
  op.bytes = b * (m * k + k * n + m * n);
  return op;
}

ComputeOp memory_op(const std::string& name, double bytes, double flops) {
  ComputeOp op;
  op.name = name;
  op.kind = OpKind::MemoryBound;
  op.bytes = bytes;
  op.flops = flops;
  return op;
}

}  // namespace trainsim
