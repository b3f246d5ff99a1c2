#pragma once
// Failures over a job's life: component failure rates (defaults derived from
// the Llama 3 report), checkpoint and restart costs, spare nodes, and a seeded
// Monte Carlo of the job's wall-clock time beside the Young/Daly analytic
// optimum. Says how many interruptions to expect, what share of the wall time
// trains (ETTR), the goodput and the best checkpoint interval (docs/faults.md).
#include <cstdint>
#include <string>
#include <vector>

namespace trainsim {

// What one failure rate is counted per: each GPU, each node or the job.
enum class FailureScope : std::uint8_t { Gpu, Node, Job };
const char* to_string(FailureScope s);

struct ComponentFailureRate {
  std::string component;
  FailureScope scope = FailureScope::Gpu;
  double per_unit_per_day = 0;  // failures per GPU, node or job per day
  bool takes_node_out = false;  // the failed node leaves the job until repaired (hardware)
  std::string source;
};

// The default rates: Llama 3's unexpected interruptions by root cause (Llama
// Team, arXiv:2407.21783, Table 5: 419 over 54 days of a 16,384-H100 job),
// each divided by its exposure (GPU-days or node-days of that job).
std::vector<ComponentFailureRate> llama3_failure_rates();

enum class CheckpointMode : std::uint8_t {
  Synchronous,   // the job stops while the checkpoint is written to storage
  Asynchronous,  // stops for a copy to host memory; written to storage in the background
  InMemory,      // stops for a copy to a peer node's memory; restarts reload from peers
};
const char* to_string(CheckpointMode m);

struct ReliabilitySpec {
  double duration_s = 0;  // wall-clock length of the job
  std::vector<ComponentFailureRate> components;
  double planned_per_day = 0;        // planned interruptions (maintenance), each after a checkpoint
  double checkpoint_interval_s = 0;  // training time between checkpoints; 0 = the Young/Daly optimum
  CheckpointMode checkpoint_mode = CheckpointMode::Synchronous;
  double storage_bandwidth = 0;   // bytes/s for the whole job: checkpoint writes and reloads
  double snapshot_bandwidth = 0;  // bytes/s per GPU: to host memory (asynchronous) or to a peer (in-memory)
  double restart_s = 0;           // detection, rescheduling and process start, before the reload
  int spare_nodes = -1;           // -1: the cluster always has healthy nodes to restart on
  double repair_s = 0;            // how long a failed node is out (with spare_nodes >= 0)
  std::uint64_t seed = 1;
  int trials = 200;
};

// The job as the simulation found it.
struct JobShape {
  int gpus = 0;
  int nodes = 0;
  double iteration_s = 0;
  double units_per_s = 0;         // throughput without interruptions
  double checkpoint_bytes = 0;    // one checkpoint of the whole job (weights and optimizer state)
  double peer_bandwidth_gpu = 0;  // network bytes/s per GPU (default in-memory snapshot rate)
};

struct ComponentInterruptions {
  std::string component;
  double expected = 0;
};

struct ReliabilityReport {
  double duration_s = 0;
  double interruptions_expected = 0;  // unexpected + planned over the duration
  double unexpected_expected = 0;
  double planned_expected = 0;
  std::vector<ComponentInterruptions> by_component;  // unexpected, largest first
  double mtbf_s = 0;                                 // mean time between unexpected interruptions
  double checkpoint_bytes = 0;
  double checkpoint_stall_s = 0;  // the job stops this long per checkpoint
  double checkpoint_write_s = 0;  // the checkpoint is durable this long after it starts
  double reload_s = 0;
  double restart_s = 0;
  double checkpoint_interval_s = 0;  // used (whole iterations)
  double optimal_interval_s = 0;     // Young/Daly, in whole iterations
  double ettr_analytic = 0;          // at the interval used
  int trials = 0;
  double ettr_mean = 0, ettr_p05 = 0, ettr_p95 = 0;  // Monte Carlo
  double interruptions_mean = 0;
  // Mean wall seconds per job lost to each cause (Monte Carlo).
  double lost_work_s = 0, restart_time_s = 0, checkpoint_time_s = 0, spare_wait_s = 0;
  double goodput_units_per_s = 0;  // throughput x ETTR (mean)
};

// Bound on the Monte Carlo's work (segments x trials); above it the input is refused.
inline constexpr double kMaxReliabilitySegments = 5e7;

// Segments one trial walks through at most, expected: checkpoints plus interruptions.
double reliability_segments(const ReliabilitySpec& spec, const JobShape& job);

// The analysis. Deterministic for a given seed.
ReliabilityReport analyse_reliability(const ReliabilitySpec& spec, const JobShape& job);

}  // namespace trainsim
