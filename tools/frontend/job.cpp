#include "tools/frontend/job.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "models/planner.hpp"
#include "sim/check.hpp"
#include "sim/executor.hpp"
#include "sim/platform.hpp"

namespace trainsim {

namespace {
constexpr double kGiB = 1073741824.0;

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}
}  // namespace

std::unique_ptr<Workload> workload_of(const Scenario& s) {
  return std::make_unique<TransformerWorkload>(s.model, s.parallel, s.training);
}

JobReport simulate(const Scenario& s, Fidelity fidelity) { return run_job(s, fidelity).report; }

JobRun run_job(const Scenario& s, Fidelity fidelity) {
  const auto t0 = std::chrono::steady_clock::now();
  JobRun run;
  JobReport& rep = run.report;
  rep.scenario = s.name;
  rep.fidelity = to_string(fidelity);
  Platform platform(s.cluster, s.profiles);
  const Cluster& cluster = platform.cluster();
  rep.gpus = cluster.num_gpus();
  const std::unique_ptr<NetworkModel> network = platform.network_model(fidelity);
  PlanOptions opts;
  opts.representatives = !network->needs_every_member();
  run.plan = workload_of(s)->plan(platform, Placement::of(s.parallel), opts);
  const WorkloadPlan& plan = run.plan;
  {
    Executor exec(plan.setup, cluster, platform.costs(), *network);
    run.result = exec.run();
    rep.warnings = network->warnings();
  }
  const SimulationResult& res = run.result;

  rep.events = res.events;
  rep.simulated_ranks = static_cast<int>(plan.setup.ranks.size());
  rep.expert_rank_tokens = plan.expert_rank_tokens;
  rep.expert_dropped_fraction = plan.expert_dropped_fraction;
  rep.iteration_time_s = res.makespan.to_seconds();
  rep.throughput_unit = plan.throughput_unit;
  rep.flops_convention = plan.flop_convention;
  if (rep.iteration_time_s > 0) {
    rep.samples_per_s = plan.samples_per_iteration / rep.iteration_time_s;
    rep.units_per_s = plan.units_per_iteration / rep.iteration_time_s;
    if (plan.throughput_unit == "tokens") rep.tokens_per_s = rep.units_per_s;
    rep.tflops_per_gpu = plan.model_flops / rep.iteration_time_s / rep.gpus / 1e12;
    double peak = 0;
    for (int g = 0; g < cluster.num_gpus(); ++g) peak += cluster.gpu_type(cluster.gpu_type_of(g)).peak(plan.peak_dtype);
    rep.mfu = plan.model_flops / rep.iteration_time_s / peak;
    rep.hfu = plan.hardware_flops / rep.iteration_time_s / peak;
  }
  if (!res.completed) {
    rep.feasible = false;
    // Members posting different transfers is a planner bug, never bad input.
    if (res.mismatch) {
      std::string posts;
      for (const WaitingTask& w : res.deadlock) posts += "; " + w.rank + " '" + w.task + "' " + w.reason;
      TRAINSIM_CHECK(!res.mismatch, "members of one communicator posted different transfers" + posts);
    }
    rep.problems.push_back("deadlock: " + std::to_string(res.deadlocked_ranks) + " rank(s) can never finish");
    for (const WaitingTask& w : res.deadlock) {
      rep.problems.push_back("  " + w.rank + ", stream " + w.stream + ", task '" + w.task + "': " + w.reason);
    }
  }

  double best_compute = -1;
  for (int st = 0; st < static_cast<int>(plan.stages.size()); ++st) {
    StageReport sr;
    sr.stage = st;
    sr.layers = plan.stages[st].layers;
    const int rank = plan.recorded_rank_of_stage[st];
    for (const auto& tl : res.timelines) {
      if (static_cast<int>(tl.rank) == rank) sr.time = breakdown(tl.intervals, res.makespan);
    }
    sr.memory = plan.stages[st].memory;
    const int gpu = plan.setup.ranks[rank].gpu;
    const int type = cluster.gpu_type_of(gpu);
    sr.memory_capacity = cluster.gpu_type(type).memory_bytes - platform.profile(type).memory_reserved.value;
    rep.peak_memory_gib = std::max(rep.peak_memory_gib, sr.memory.total() / kGiB);
    if (sr.memory.total() > sr.memory_capacity) {
      rep.feasible = false;
      const MemoryBreakdown& m = sr.memory;
      rep.problems.push_back(
          "out of memory on " + plan.setup.ranks[rank].name + " (" + cluster.gpu_type(type).name + "): needs " +
          fmt("%.1f", m.total() / kGiB) + " GiB of " + fmt("%.1f", sr.memory_capacity / kGiB) +
          " GiB usable (weights " + fmt("%.1f", m.weights / kGiB) + ", gradients " + fmt("%.1f", m.gradients / kGiB) +
          ", optimizer " + fmt("%.1f", m.optimizer / kGiB) + ", activations " + fmt("%.1f", m.activations / kGiB) +
          ", buffers " + fmt("%.1f", m.buffers / kGiB) + " GiB)");
    }
    if (sr.time.compute_s > best_compute) {
      best_compute = sr.time.compute_s;
      rep.breakdown = sr.time;
    }
    rep.per_stage.push_back(sr);
  }
  rep.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

std::string kernel_table(const Scenario& s, int stage) {
  const Platform platform(s.cluster, s.profiles);
  const Cluster& cluster = platform.cluster();
  const ComputeCostModel& costs = platform.costs();
  const WorkloadPlan plan = workload_of(s)->plan(platform, Placement::of(s.parallel), PlanOptions{});
  const ProgramTemplate& prog = plan.setup.programs.at(static_cast<std::size_t>(stage));
  const int type = cluster.gpu_type_of(plan.setup.ranks[plan.recorded_rank_of_stage[stage]].gpu);
  const GpuSpec& gpu = cluster.gpu_type(type);
  struct Row {
    double seconds = 0, flops = 0, bytes = 0;
    int count = 0;
  };
  std::map<std::string, Row> rows;
  double total = 0;
  for (const Task& t : prog.tasks) {
    if (t.kind != TaskKind::Compute) continue;
    const ComputeOp& op = prog.ops[t.ref];
    const std::string phase = prog.labels[t.label].substr(0, 1);
    Row& r = rows[(phase == "R" ? "R " : "") + op.name];
    const double sec = costs.duration(op, type).to_seconds();
    r.seconds += sec;
    r.flops += op.flops;
    r.bytes += op.bytes;
    r.count += 1;
    total += sec;
  }
  std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::string out =
      "kernels of stage " + std::to_string(stage) + " (" + gpu.name + "), compute total " + fmt("%.3f", total) + " s\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-28s %8s %9s %7s %10s %10s\n", "op", "count", "time s", "share", "TFLOP/s",
                "GB/s");
  out += line;
  for (const auto& [name, r] : sorted) {
    std::snprintf(line, sizeof line, "  %-28s %8d %9.4f %6.1f%% %10.1f %10.1f\n", name.c_str(), r.count, r.seconds,
                  100 * r.seconds / total, r.flops / r.seconds / 1e12, r.bytes / r.seconds / 1e9);
    out += line;
  }
  return out;
}

namespace {
nlohmann::json breakdown_json(const TimeBreakdown& b) {
  nlohmann::json exposed;
  for (std::size_t c = 0; c < kNumCommClasses; ++c) exposed[to_string(static_cast<CommClass>(c))] = b.exposed_comm_s[c];
  return {{"compute_s", b.compute_s}, {"exposed_comm_s", exposed}, {"bubble_s", b.bubble_s}, {"idle_s", b.idle_s}};
}
}  // namespace

nlohmann::json to_json(const JobReport& r) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : r.per_stage) {
    stages.push_back({{"stage", s.stage},
                      {"layers", s.layers},
                      {"breakdown", breakdown_json(s.time)},
                      {"memory_gib",
                       {{"weights", s.memory.weights / kGiB},
                        {"gradients", s.memory.gradients / kGiB},
                        {"optimizer", s.memory.optimizer / kGiB},
                        {"activations", s.memory.activations / kGiB},
                        {"buffers", s.memory.buffers / kGiB},
                        {"total", s.memory.total() / kGiB},
                        {"capacity", s.memory_capacity / kGiB}}}});
  }
  nlohmann::json out = {{"scenario", r.scenario},
                        {"gpus", r.gpus},
                        {"iteration_time_s", r.iteration_time_s},
                        {"tokens_per_s", r.tokens_per_s},
                        {"samples_per_s", r.samples_per_s},
                        {"tflops_per_gpu", r.tflops_per_gpu},
                        {"mfu", r.mfu},
                        {"hfu", r.hfu},
                        {"peak_memory_gib", r.peak_memory_gib},
                        {"breakdown", breakdown_json(r.breakdown)},
                        {"per_stage", stages},
                        {"feasible", r.feasible},
                        {"problems", r.problems},
                        {"events", r.events},
                        {"simulated_ranks", r.simulated_ranks},
                        {"wall_time_s", r.wall_time_s}};
  if (!r.warnings.empty()) out["warnings"] = r.warnings;
  // The workload's own throughput unit (tokens for transformers) and the fidelity the figures come from.
  out["throughput"] = {{"unit", r.throughput_unit}, {"per_s", r.units_per_s}};
  out["fidelity"] = r.fidelity;
  if (!r.expert_rank_tokens.empty()) {
    out["expert_load"] = {{"rank_tokens", r.expert_rank_tokens}, {"dropped_fraction", r.expert_dropped_fraction}};
  }
  out["flops_convention"] = r.flops_convention;
  return out;
}

std::string summary_text(const JobReport& r) {
  const double it = r.iteration_time_s > 0 ? r.iteration_time_s : 1;
  const TimeBreakdown& b = r.breakdown;
  std::string out = r.scenario + " on " + std::to_string(r.gpus) + " GPUs\n";
  out += "  iteration " + fmt("%.3f", r.iteration_time_s) + " s | " + fmt("%.0f", r.tokens_per_s) + " tokens/s | " +
         fmt("%.1f", r.tflops_per_gpu) + " TFLOP/s/GPU | MFU " + fmt("%.1f", 100 * r.mfu) + "% | peak mem " +
         fmt("%.1f", r.peak_memory_gib) + " GiB/GPU\n";
  out += "  compute " + fmt("%.1f", 100 * b.compute_s / it) + "%";
  for (std::size_t c = 0; c < kNumCommClasses; ++c) {
    if (b.exposed_comm_s[c] > 0) {
      out += "  exposed " + std::string(to_string(static_cast<CommClass>(c))) + " " +
             fmt("%.1f", 100 * b.exposed_comm_s[c] / it) + "%";
    }
  }
  out += "  pipeline bubble " + fmt("%.1f", 100 * b.bubble_s / it) + "%";
  if (b.idle_s > 0) out += "  idle " + fmt("%.1f", 100 * b.idle_s / it) + "%";
  out += "\n";
  out += "  " + std::to_string(r.events) + " events, " + std::to_string(r.simulated_ranks) + " simulated ranks, " +
         fmt("%.3f", r.wall_time_s) + " s wall\n";
  for (const auto& w : r.warnings) out += "  warning: " + w + "\n";
  if (!r.feasible) {
    out += "  INFEASIBLE:\n";
    for (const auto& p : r.problems) out += "  " + p + "\n";
  }
  return out;
}

double metric_value(const JobReport& r, const std::string& metric) {
  if (metric == "iteration_time_s") return r.iteration_time_s;
  if (metric == "tokens_per_s") return r.tokens_per_s;
  if (metric == "tflops_per_gpu") return r.tflops_per_gpu;
  if (metric == "mfu") return r.mfu;
  if (metric == "samples_per_s") return r.samples_per_s;
  if (metric == "hfu") return r.hfu;
  if (metric == "peak_memory_gib") return r.peak_memory_gib;
  if (metric == "units_per_s") return r.units_per_s;
  TRAINSIM_CHECK(false, "no result field named \"" + metric + "\"");
  return 0;
}

}  // namespace trainsim
