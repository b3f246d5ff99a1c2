#include "tools/frontend/chakra_export.hpp"

#include "sim/platform.hpp"

namespace trainsim {

namespace {
// Chakra's CollectiveCommType codes (et_def.proto).
int chakra_comm_type(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce:
      return 0;
    case CollectiveKind::AllGather:
      return 2;
    case CollectiveKind::Broadcast:
      return 5;
    case CollectiveKind::AllToAll:
      return 6;
    case CollectiveKind::ReduceScatter:
      return 7;
  }
  return 0;
}

nlohmann::json attr(const char* name, const nlohmann::json& value, const char* field) {
  return nlohmann::json{{"name", name}, {field, value}};
}
}  // namespace

nlohmann::json chakra_trace_of(const Scenario& s, const JobRun& run) {
  const WorkloadPlan& plan = run.plan;
  if (s.workload.kind != WorkloadKind::Transformer || s.parallel.pp != 1 || s.parallel.cp != 1 || s.parallel.ep != 1) {
    throw InputError({Diagnostic{s.file, "/parallel",
                                 "a Chakra trace is written for a transformer job with pp, cp and ep 1 (one program, "
                                 "tp and dp groups)"}});
  }
  const RankProgram& rank = plan.setup.ranks.at(0);
  const ProgramTemplate& prog = plan.setup.programs.at(rank.program);
  const Platform platform(s.cluster, s.profiles);
  const Cluster& cluster = platform.cluster();
  const int type = rank.gpu_type >= 0 ? rank.gpu_type : cluster.gpu_type_of(rank.gpu);
  nlohmann::json nodes = nlohmann::json::array();
  for (std::uint32_t t = 0; t < prog.tasks.size(); ++t) {
    const Task& task = prog.tasks[t];
    nlohmann::json n;
    n["id"] = t;
    n["name"] = std::string(prog.labels[task.label]);
    nlohmann::json attrs = nlohmann::json::array();
    attrs.push_back(attr("stream", prog.streams[task.stream], "string_val"));
    if (task.kind == TaskKind::Compute) {
      const ComputeOp& op = prog.ops[task.ref];
      n["type"] = "COMP_NODE";
      n["duration_micros"] = platform.costs().seconds(op, type) * 1e6;
      attrs.push_back(attr("num_ops", op.flops, "double_val"));
      attrs.push_back(attr("tensor_size", op.bytes, "double_val"));
    } else if (task.kind == TaskKind::Collective) {
      const std::string& slot = prog.comm_slots[task.ref];
      if (slot != "tp" && slot != "dp") {
        throw InputError({Diagnostic{s.file, "/parallel", "communicator \"" + slot + "\" has no trace group"}});
      }
      n["type"] = "COMM_COLL_NODE";
      attrs.push_back(attr("comm_type", chakra_comm_type(task.collective), "int64_val"));
      attrs.push_back(attr("comm_size", task.bytes, "int64_val"));
      attrs.push_back(attr("pg_name", slot, "string_val"));
    } else {
      throw InputError({Diagnostic{s.file, "/parallel", "point-to-point transfers are not written to a trace"}});
    }
    n["attr"] = std::move(attrs);
    nlohmann::json deps = nlohmann::json::array();
    for (std::uint32_t d : prog.deps_of(t)) deps.push_back(d);
    n["data_deps"] = std::move(deps);
    nodes.push_back(std::move(n));
  }
  nlohmann::json doc;
  doc["schema"] = "Chakra execution trace (JSON), written by trainsim";
  doc["samples_per_replica"] = plan.samples_per_iteration / s.parallel.dp;
  doc["nodes"] = std::move(nodes);
  return doc;
}

}  // namespace trainsim
