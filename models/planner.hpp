#pragma once
// The parallel planner: turns a transformer, a parallel strategy and a cluster
// into per-stage program templates, communicators and rank bindings for the
// executor. TP (+SP), CP, PP (GPipe / 1F1B / interleaved 1F1B), DP with ZeRO
// 0-3 and bucketed, overlapped gradient reduction.
#include <vector>

#include "models/training_spec.hpp"
#include "sim/executor.hpp"

namespace trainsim {

struct PlanOptions {
  // Simulate one rank per pipeline stage: valid when every TP/CP/DP peer of a
  // rank runs the same program on the same GPU type (one GPU type in the cluster).
  bool representatives = true;
};

struct TrainingPlan {
  SimulationSetup setup;
  std::vector<int> stage_of_rank;           // pipeline stage of each simulated rank
  std::vector<int> recorded_rank_of_stage;  // the simulated rank whose timeline stands for each stage
  double model_flops = 0;                   // per iteration, whole job, Megatron-LM convention
  double hardware_flops = 0;                // the same plus recomputation
};

// Global GPU id of a rank; Megatron-LM order: tp fastest, then cp, dp, pp.
int rank_gpu(const ParallelSpec& par, int stage, int dp, int cp, int tp);

TrainingPlan plan_training(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                           const Cluster& cluster, const PlanOptions& options);

}  // namespace trainsim
