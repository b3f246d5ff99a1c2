#pragma once
// The workload seam: what a job trains, as the simulator sees it. A workload
// plans the per-rank programs of one training iteration for a platform and a
// placement, and says how its work is counted (FLOPs and their convention,
// the throughput unit) and what each pipeline stage holds in memory. Jobs,
// reports and sweeps only see this interface, so a new kind of model (MoE,
// GNN, an imported trace) is a new Workload, not a new branch in the front end.
#include <string>
#include <vector>

#include "models/memory_model.hpp"
#include "models/placement.hpp"
#include "sim/executor.hpp"
#include "sim/platform.hpp"

namespace trainsim {

struct PlanOptions {
  // Simulate one rank per equivalence class (same program, GPU type and
  // communicator timings; models/planner.cpp) instead of every rank. Network
  // models that need every member (flow) turn this off.
  bool representatives = true;
  // With `representatives` off: still one rank per TP/CP group whose members
  // time alike (a "compact" group), every data-parallel replica simulated. An
  // approximation at flow fidelity (the group's other members' flows are left
  // out, docs/network.md "Group representatives"), opt-in by the scenario.
  bool group_representatives = false;
  // With `representatives` off: simulate only the data-parallel replicas
  // [0, simulated_replicas), every rank of them (0: every replica). Exact at
  // flow fidelity where the other ranks' traffic is the image of theirs
  // (rank images, sim/link_images.hpp; the front end decides).
  int simulated_replicas = 0;
  // With `simulated_replicas`: only TP index 0 of each of their TP groups
  // (rank images that also rotate the TP index inside a node).
  bool first_tp_rank_only = false;
  // Two ranks fall in one class when each transfer on their communicators takes
  // the same time within this relative step (1% by default: a leaf or spine hop
  // more on a multi-megabyte pipeline message does not split a class; the
  // iteration time moves by far less, docs/architecture.md). 0 = exact.
  double equivalence_tolerance = 0.01;
  // Stage programs stamped from one template per layer pass (models/planner.cpp);
  // off: emitted step by step. The same programs either way (a test compares them).
  bool pass_templates = true;
  // Passes stamped from one template marked in the stage programs (PassMark),
  // so that the executor may apply a recorded run of one to another where that
  // is exact (docs/performance.md); off: every pass simulated task by task.
  // The same results either way.
  bool pass_memo = true;
};

struct StagePlan {
  int layers = 0;          // layers (work items) the stage runs per micro-batch, summed over its chunks
  MemoryBreakdown memory;  // peak per rank of the stage
  // Dense ids of the GPU types the stage's ranks run on (Cluster::gpu_type_of),
  // ascending: one on a homogeneous stage, several when the stage spans node groups.
  std::vector<int> gpu_types;
};

struct WorkloadPlan {
  SimulationSetup setup;
  std::vector<int> stage_of_rank;           // pipeline stage of each simulated rank
  std::vector<int> recorded_rank_of_stage;  // the simulated rank whose timeline stands for each stage
  std::vector<StagePlan> stages;
  double model_flops = 0;     // per iteration, whole job, by `flop_convention`
  double hardware_flops = 0;  // the same plus recomputation
  std::string flop_convention;
  std::string throughput_unit = "tokens";  // what units_per_iteration counts: tokens, samples, graphs
  double units_per_iteration = 0;
  double samples_per_iteration = 0;
  double checkpoint_bytes = 0;     // one checkpoint of the whole job: what a restart reloads
  Dtype peak_dtype = Dtype::BF16;  // whose peak FLOP/s MFU divides by
  // Mixture-of-experts: routed tokens each expert-parallel rank processes per
  // micro-batch and MoE layer (the busiest sets the pace), and the share of
  // routed tokens the capacity factor drops; empty / 0 for other workloads.
  std::vector<double> expert_rank_tokens;
  double expert_dropped_fraction = 0;
  // Uneven data-parallel shares (models/dp_shares.hpp): micro-batches of each
  // replica; empty for an even split.
  std::vector<int> dp_shares;
  // Uneven ring-CP shares (docs/heterogeneous.md): tokens of each CP rank, and
  // the CP rank whose compute per micro-batch is the longest (it sets the pace).
  std::vector<int> cp_shares;
  int cp_pace_rank = -1;
  // Uneven Ulysses head shares: query heads of a TP rank per Ulysses rank (else empty).
  std::vector<int> head_shares;
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string name() const = 0;
  virtual WorkloadPlan plan(const Platform& platform, const Placement& placement, const PlanOptions& options) const = 0;
};

}  // namespace trainsim
