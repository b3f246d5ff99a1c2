#pragma once
// PipeDream's asynchronous pipelines (no flush): PipeDream with weight
// stashing (Narayanan et al., SOSP 2019) and PipeDream-2BW's double-buffered
// weights (Narayanan et al., ICML 2021, arXiv:2006.09503). Both run 1F1B's
// units without ever draining the pipeline; what differs from 1F1B is how
// many versions of a stage's weights are kept, how stale the weights a
// gradient is computed with are, and how often the optimizer steps.
#include "models/training_spec.hpp"

namespace trainsim {

// PipeDream or PipeDream-2BW: iterations follow each other without a flush.
bool asynchronous_pipeline(ScheduleKind kind);

// Versions of its weights pipeline rank `stage` of `pp` holds: under
// PipeDream one per micro-batch in flight (weight stashing: pp - stage, the
// current one included), under PipeDream-2BW two, otherwise one.
int weight_versions(ScheduleKind kind, int pp, int stage);

// Optimizer steps between the weights a micro-batch's forward reads on
// `stage` and the step its gradient is applied at: PipeDream pp - 1 - stage
// (W(t+1) = W(t) - lr grad(W_1(t-p+1), ..., W_p(t))), PipeDream-2BW 1
// (W(t+1) = W(t) - lr grad(W(t-1))), synchronous schedules 0.
int weight_staleness(ScheduleKind kind, int pp, int stage);

// Optimizer steps per iteration of `m` micro-batches: PipeDream updates after
// every micro-batch (its minibatch), everything else once per iteration
// (PipeDream-2BW: gradients coalesced over the m micro-batches).
int optimizer_steps_per_iteration(ScheduleKind kind, int m);

}  // namespace trainsim
