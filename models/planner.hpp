#pragma once
// The dense transformer workload: turns a transformer, a parallel strategy and
// a platform into per-stage program templates (emitted from the pipeline
// schedule's units), communicators from a named registry and rank bindings
// through the placement. TP (+SP), CP, PP (any schedule of F / B / W units,
// models/schedule.hpp), DP with ZeRO 0-3 and bucketed, overlapped gradient
// reduction.
#include <string>
#include <vector>

#include "models/training_spec.hpp"
#include "models/workload.hpp"

namespace trainsim {

class TransformerWorkload final : public Workload {
 public:
  TransformerWorkload(TransformerSpec model, ParallelSpec par, TrainingSpec train);
  std::string name() const override { return model_.name; }
  WorkloadPlan plan(const Platform& platform, const Placement& placement, const PlanOptions& options) const override;

 private:
  TransformerSpec model_;
  ParallelSpec par_;
  TrainingSpec train_;
};

using TrainingPlan = WorkloadPlan;

// Global GPU id of a rank in Megatron-LM order (tp fastest, then cp, dp, pp).
int rank_gpu(const ParallelSpec& par, int stage, int dp, int cp, int tp);

// The transformer's plan with the parallel spec's own placement and a
// cluster's facts (GPU types and communicator timings from `profiles`, one
// per GPU type; ideal links and kernels when empty).
TrainingPlan plan_training(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                           const Cluster& cluster, const PlanOptions& options,
                           const std::vector<CalibrationProfile>& profiles = {});

}  // namespace trainsim
