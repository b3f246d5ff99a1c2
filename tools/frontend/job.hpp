#pragma once
// Runs one scenario through planner, executor and memory model, and turns the
// outcome into the result contract of DESIGN.md §5 (summary text and JSON).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/memory_model.hpp"
#include "models/planner.hpp"
#include "sim/metrics.hpp"
#include "tools/frontend/scenario.hpp"

namespace trainsim {

struct StageReport {
  int stage = 0;
  int layers = 0;
  TimeBreakdown time;
  MemoryBreakdown memory;
  double memory_capacity = 0;  // bytes usable on this stage's GPU
};

struct JobReport {
  std::string scenario;
  int gpus = 0;
  double iteration_time_s = 0;
  double tokens_per_s = 0;
  double samples_per_s = 0;
  double tflops_per_gpu = 0;
  double mfu = 0;
  double hfu = 0;
  double peak_memory_gib = 0;
  TimeBreakdown breakdown;  // of the bottleneck stage (most compute)
  std::vector<StageReport> per_stage;
  bool feasible = true;
  std::vector<std::string> problems;  // why infeasible: OOM ranks, deadlock
  // Platform facts the network fidelity represents only approximately (printed, never silent).
  std::vector<std::string> warnings;
  std::uint64_t events = 0;
  double wall_time_s = 0;
  int simulated_ranks = 0;
};

// Everything one simulation produced: the report, and for timelines and traces
// the plan (programs, ranks, communicators) and the executor's result.
struct JobRun {
  JobReport report;
  TrainingPlan plan;
  SimulationResult result;
};

// How the network is simulated. Analytical: alpha-beta time per communicator,
// one rank per pipeline stage simulated where that is exact. Flow: collectives
// and send/recv as max-min fair flows on the cluster graph (fabric,
// oversubscription, datacenters), every rank simulated (docs/network.md).
enum class Fidelity { Analytical, Flow };
const char* to_string(Fidelity f);

JobRun run_job(const Scenario& scenario, Fidelity fidelity = Fidelity::Analytical);
JobReport simulate(const Scenario& scenario, Fidelity fidelity = Fidelity::Analytical);  // run_job(...).report

// Per-kernel time of one pipeline stage's iteration (compute tasks only), the
// largest first: where the compute time goes and at what efficiency.
std::string kernel_table(const Scenario& scenario, int stage);

nlohmann::json to_json(const JobReport& r);
std::string summary_text(const JobReport& r);
// The value of a result field by name (for validation and sweeps).
double metric_value(const JobReport& r, const std::string& metric);

}  // namespace trainsim
