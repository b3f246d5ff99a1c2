#pragma once
// The rules a parallel layout must meet to be planned: GPU count, head / FFN /
// layer / batch / sequence divisibility, schedule and virtual stages (a custom
// schedule's units), placement, GPUs supporting the training precision,
// features not modelled yet. One checker for the scenario loader, the auto-search and the planner.
#include <cstdint>
#include <string>
#include <vector>

#include "models/training_spec.hpp"

namespace trainsim {

// One broken rule: `path` is a JSON pointer into the scenario ("/parallel/tp").
struct LayoutProblem {
  std::string path;
  std::string message;
};

// Multinomial routing (models/moe.hpp) keeps one ep x ep traffic matrix and
// draws ep x experts counts per micro-batch: micro-batches * ep * max(ep,
// experts) is at most this (docs/limits.md).
inline constexpr std::int64_t kMaxRoutingDrawWork = 16777216;

// Every rule the layout breaks, in a fixed order; empty when it can be planned.
// Products (tp*pp*dp*cp, micro_batch*dp) are computed without overflow.
std::vector<LayoutProblem> check_layout(const TransformerSpec& model, const ParallelSpec& parallel,
                                        const TrainingSpec& training, const ClusterSpec& cluster);

}  // namespace trainsim
