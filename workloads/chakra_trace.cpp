#include "workloads/chakra_trace.hpp"

#include <cmath>
#include <map>

#include "sim/check.hpp"

namespace trainsim {

const char* to_string(TraceGroup g) {
  switch (g) {
    case TraceGroup::TP:
      return "tp";
    case TraceGroup::DP:
      return "dp";
    case TraceGroup::World:
      return "world";
  }
  return "?";
}

WorkloadPlan TraceWorkload::plan(const Platform& /*platform*/, const Placement& placement,
                                 const PlanOptions& /*options*/) const {
  const TraceSpec& s = spec_;
  const int ranks = placement.ranks();
  const int tp = s.tp;
  TRAINSIM_CHECK(tp >= 1 && ranks % tp == 0, "trace ranks are tp x dp");
  const int dp = ranks / tp;

  ProgramBuilder pb("trace");
  std::map<std::string, std::uint8_t> streams;
  auto stream = [&](const std::string& name) {
    auto it = streams.find(name);
    if (it == streams.end()) it = streams.emplace(name, pb.add_stream(name)).first;
    return it->second;
  };
  stream("compute");
  const std::uint32_t slot_tp = pb.add_comm_slot("tp");
  const std::uint32_t slot_dp = pb.add_comm_slot("dp");
  const std::uint32_t slot_world = pb.add_comm_slot("world");
  std::vector<TaskId> task_of(s.nodes.size());
  double flops = 0;
  for (std::size_t i = 0; i < s.nodes.size(); ++i) {
    const TraceNode& n = s.nodes[i];
    std::vector<TaskId> deps;
    for (std::uint32_t d : n.deps) deps.push_back(task_of[d]);
    const std::uint32_t label = pb.add_label(n.name);
    if (n.collective) {
      const std::uint32_t slot = n.group == TraceGroup::TP ? slot_tp : n.group == TraceGroup::DP ? slot_dp : slot_world;
      const CommClass cls = n.group == TraceGroup::TP ? CommClass::TP : CommClass::DP;
      const std::string st = n.stream.empty() ? std::string("comm.") + to_string(n.group) : n.stream;
      task_of[i] = pb.collective(stream(st), slot, n.kind, cls, n.comm_bytes, label, -1, deps);
    } else {
      ComputeOp op;
      op.name = n.name;
      op.dtype = s.dtype;
      if (s.recost && (n.flops > 0 || n.bytes > 0)) {
        op.kind = n.flops > 0 ? OpKind::Gemm : OpKind::MemoryBound;
        op.flops = n.flops;
        op.bytes = n.bytes;
        // A trace node states its work, not its GEMM shape: costed as the square GEMM of its FLOPs.
        const auto side = static_cast<std::int64_t>(std::cbrt(n.flops / 2));
        op.m = op.n = op.k = side;
      } else {
        op.kind = OpKind::MemoryBound;
        op.measured_seconds = n.duration_s;
        op.flops = n.flops;
      }
      flops += n.flops;
      task_of[i] =
          pb.compute(stream(n.stream.empty() ? "compute" : n.stream), pb.add_op(std::move(op)), label, -1, deps);
    }
  }

  WorkloadPlan plan;
  plan.setup.programs.push_back(std::move(pb).finish());
  std::vector<int> world;
  for (int d = 0; d < dp; ++d) {
    for (int t = 0; t < tp; ++t) world.push_back(placement.gpu(RankCoord{t, 0, 0, d, 0}));
  }
  plan.setup.comms.push_back(Communicator{"world", world, ranks});
  std::map<int, std::uint32_t> tp_comm, dp_comm;
  for (int d = 0; d < dp; ++d) {
    std::vector<int> m;
    for (int t = 0; t < tp; ++t) m.push_back(placement.gpu(RankCoord{t, 0, 0, d, 0}));
    tp_comm[d] = static_cast<std::uint32_t>(plan.setup.comms.size());
    plan.setup.comms.push_back(Communicator{"tp group (dp " + std::to_string(d) + ")", m, tp});
  }
  for (int t = 0; t < tp; ++t) {
    std::vector<int> m;
    for (int d = 0; d < dp; ++d) m.push_back(placement.gpu(RankCoord{t, 0, 0, d, 0}));
    dp_comm[t] = static_cast<std::uint32_t>(plan.setup.comms.size());
    plan.setup.comms.push_back(Communicator{"dp group (tp " + std::to_string(t) + ")", m, dp});
  }
  for (int d = 0; d < dp; ++d) {
    for (int t = 0; t < tp; ++t) {
      RankProgram rp;
      rp.program = 0;
      rp.gpu = placement.gpu(RankCoord{t, 0, 0, d, 0});
      rp.name = "rank (dp " + std::to_string(d) + ", tp " + std::to_string(t) + ", gpu " + std::to_string(rp.gpu) + ")";
      rp.record = d == 0 && t == 0;
      rp.comm_of_slot = {tp_comm[d], dp_comm[t], 0};
      plan.setup.ranks.push_back(std::move(rp));
      plan.stage_of_rank.push_back(0);
    }
  }
  plan.recorded_rank_of_stage = {0};
  StagePlan stage;
  stage.layers = 1;
  plan.stages = {stage};
  plan.model_flops = plan.hardware_flops = flops * ranks;
  plan.flop_convention = "trace: the FLOPs its compute nodes state (num_ops), summed over ranks";
  plan.throughput_unit = "samples";
  plan.units_per_iteration = plan.samples_per_iteration = s.samples_per_replica * dp;
  plan.peak_dtype = s.dtype;
  return plan;
}

}  // namespace trainsim
