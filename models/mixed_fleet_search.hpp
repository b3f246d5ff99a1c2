#pragma once
// Candidate plans of one model on a cluster of several node groups (GPU types),
// as Metis, HETHUB and Sailor search them: which group runs which pipeline
// stages, how many layers each stage takes, each stage's TP, and the DP degree;
// invalid (check_layout) and out-of-memory plans pruned before any simulation.
// The plans that treat every GPU alike (uniform TP, layers split evenly) are
// enumerated too, so the ranking can say how far each plan is from them.
#include <cstddef>
#include <vector>

#include "models/training_spec.hpp"

namespace trainsim {

struct MixedFleetSearchSpace {
  std::vector<int> tp;  // per-stage TP choices; empty: 1, 2, 4, ... up to the GPUs per node
  std::vector<int> micro_batch{1, 2, 4};
  int max_stages_per_group = 4;
  int layer_step = 1;  // granularity of the layer split between groups
  // Also per-stage DP (parallel.stages dp and micro_batch): each group any TP of
  // `tp`, its DP the rest of its GPUs, the same samples per pipeline step.
  bool stage_dp = false;
};

struct MixedFleetCandidate {
  ParallelSpec par;          // with per-stage layouts (parallel.stages)
  bool homogeneous = false;  // uniform TP over the cluster in GPU order, layers split evenly
};

struct MixedFleetSearchResult {
  std::size_t enumerated = 0;
  std::size_t invalid = 0;     // break a layout rule
  std::size_t pruned_oom = 0;  // some stage needs more than its GPU's usable memory
  std::vector<MixedFleetCandidate> candidates;
};

// `base` gives global_batch and the settings every candidate keeps (schedule,
// recomputation, ZeRO, overlaps); `memory_capacity[g]` is the usable memory per
// GPU of cluster group g.
MixedFleetSearchResult search_mixed_fleet(const TransformerSpec& model, const TrainingSpec& training,
                                          const ClusterSpec& cluster, const ParallelSpec& base,
                                          const std::vector<double>& memory_capacity,
                                          const MixedFleetSearchSpace& space);

}  // namespace trainsim
