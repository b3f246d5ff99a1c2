#pragma once
// Runs one scenario: its workload plans the rank programs on the platform
// through the placement, the executor runs them over the chosen network model,
// and the outcome becomes the result contract of DESIGN.md §5 (summary text
// and JSON). Nothing here knows what kind of model is trained.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <memory>

#include "models/memory_model.hpp"
#include "models/planner.hpp"
#include "models/reliability.hpp"
#include "models/workload.hpp"
#include "sim/metrics.hpp"
#include "tools/frontend/scenario.hpp"
#include "tools/frontend/wan_report.hpp"

namespace trainsim {

struct StageReport {
  int stage = 0;
  int layers = 0;
  TimeBreakdown time;
  MemoryBreakdown memory;
  double memory_capacity = 0;     // bytes usable on this stage's GPU
  std::vector<std::string> gpus;  // the GPU types of the stage's ranks
  // PipeDream / PipeDream-2BW (models/pipedream.hpp): versions of the weights
  // held, and how many optimizer steps old the weights a gradient is taken with are.
  int weight_versions = 1;
  int weight_staleness = 0;
};

// GPUs slower than their type (scenario "perturbations") and what they cost.
struct PerturbationReport {
  int slowed_gpus = 0;
  int degraded_links = 0;  // "links" entries (flow fidelity)
  double max_slowdown = 1;
  std::string slowest_rank;  // the simulated rank on the slowest GPU: it sets the pace
  int slowest_stage = 0;
  double unperturbed_iteration_time_s = 0;  // the same job with every GPU as its type
  double lost_s = 0;                        // iteration time lost to the perturbations
  // Each entry's cost on its own (the job with only that entry), when the
  // section has at most kMaxAttributedPerturbations entries; the costs need
  // not add up to `lost_s`: the slowest member of a group sets its pace.
  struct Source {
    std::string pointer;
    double lost_s = 0;
  };
  std::vector<Source> each;
  int entries = 0;  // entries of the section (each empty when above the limit)
};
inline constexpr std::size_t kMaxAttributedPerturbations = 16;

// The expected slowest GPU of one GPU model of the cluster, which every GPU of
// the model waits for (the profile's gpu_speed_spread, docs/calibration.md).
struct SlowestGpuReport {
  std::string gpu;
  long gpus = 0;
  double spread = 0;
  double factor = 1;  // its kernels take this many times as long as the median GPU's
};

struct JobReport {
  std::string scenario;
  int gpus = 0;
  double iteration_time_s = 0;
  // With training.optimizer_sync "post-validation": one iteration alone (every
  // rank starting together), beside iteration_time_s, the steady period of
  // overlapping iterations (the longest rank span). 0 otherwise.
  double single_iteration_s = 0;
  double tokens_per_s = 0;
  std::string throughput_unit = "tokens";  // what units_per_s counts (the workload's unit)
  double units_per_s = 0;
  std::string flops_convention;  // how model FLOPs are counted (the workload's convention)
  double samples_per_s = 0;
  double tflops_per_gpu = 0;
  double mfu = 0;
  double hfu = 0;
  double peak_memory_gib = 0;
  TimeBreakdown breakdown;  // of the bottleneck stage (most compute)
  // The stage that sets the pace (the bottleneck stage above) and, of its GPU
  // types, the slowest (lowest peak FLOP/s at the training precision, after any
  // slowdown): on a mixed fleet, the member every other waits for.
  int pace_stage = 0;
  std::string pace_gpu;
  std::vector<StageReport> per_stage;
  bool feasible = true;
  // False when the job was refused before simulation (it does not fit in memory,
  // or the flow fidelity would exceed its memory limit): no times, only memory.
  bool simulated = true;
  std::vector<std::string> problems;  // why infeasible: OOM ranks, deadlock
  std::vector<std::string> warnings;  // what the chosen fidelity approximates (docs/network.md)
  std::string fidelity = "analytical";
  std::uint64_t events = 0;
  double wall_time_s = 0;
  int simulated_ranks = 0;
  // Flow fidelity: which ranks ran ("all", "groups (exact)": one per TP group
  // of a symmetric cluster, "groups": the opt-in approximation); else empty.
  std::string flow_ranks;
  std::optional<ReliabilityReport> reliability;  // with a "reliability" section and a feasible job
  std::optional<PerturbationReport> perturbations;
  // Per GPU model whose speed spread slows a job of more than one GPU.
  std::vector<SlowestGpuReport> slowest_gpus;
  std::vector<double> expert_rank_tokens;  // MoE: routed tokens per EP rank, micro-batch and MoE layer
  double expert_dropped_fraction = 0;      // MoE: routed tokens dropped by the capacity factor
  std::vector<int> dp_shares;              // uneven data-parallel shares: micro-batches per replica (else empty)
  std::vector<int> cp_shares;              // uneven ring-CP shares: tokens per CP rank (else empty)
  int cp_pace_rank = -1;                   // uneven CP or heads: the CP rank with the longest compute
  std::vector<int> head_shares;            // uneven Ulysses head shares: query heads of a TP rank per Ulysses rank
  std::vector<WanCrossing> wan;            // several datacenters: which communicators cross the WAN
  std::vector<WanLinkLoad> wan_links;      // several datacenters: what the WAN between each pair of sites carried
  std::optional<DilocoReport> diloco;      // with a "diloco" section: the outer step (docs/cross-datacenter.md)
};

// Everything one simulation produced: the report, and for timelines and traces
// the plan (programs, ranks, communicators) and the executor's result.
struct JobRun {
  JobReport report;
  TrainingPlan plan;
  SimulationResult result;
};

// The workload a scenario trains (the dense transformer today).
std::unique_ptr<Workload> workload_of(const Scenario& scenario);

// What a job the memory model already knows does not fit gets: refused before
// simulation (the default), or timed all the same (`run --ignore-memory`, a what-if).
enum class MemoryCheck { BeforeSimulation, SimulateAnyway };

JobRun run_job(const Scenario& scenario, Fidelity fidelity = Fidelity::Analytical,
               MemoryCheck memory = MemoryCheck::BeforeSimulation);
JobReport simulate(const Scenario& scenario, Fidelity fidelity = Fidelity::Analytical,
                   MemoryCheck memory = MemoryCheck::BeforeSimulation);  // run_job(...).report

// Per-kernel time of one pipeline stage's iteration (compute tasks only), the
// largest first: where the compute time goes and at what efficiency.
struct KernelRow {
  std::string op;
  int count = 0;
  double seconds = 0, flops = 0, bytes = 0;
};
struct StageKernels {
  int stage = 0;
  std::string gpu;
  double total_seconds = 0;
  std::vector<KernelRow> rows;  // the largest time first
};
StageKernels stage_kernels(const Scenario& scenario, int stage);
std::string kernel_table(const Scenario& scenario, int stage);
// Every stage's kernels as JSON (`run --kernels --json`: the result's "kernels" field).
nlohmann::json kernels_json(const Scenario& scenario);

nlohmann::json to_json(const JobReport& r);
std::string summary_text(const JobReport& r);
// The value of a result field by name (for validation and sweeps).
double metric_value(const JobReport& r, const std::string& metric);

}  // namespace trainsim
