#pragma once
// Peak memory of one pipeline rank: weights, gradients and optimizer states
// (mixed precision, ZeRO 0-3), activations of the micro-batches the schedule
// keeps in flight (Korthikanti et al. 2022, generalised to GQA and gated MLPs;
// SP, CP and recomputation), and the loss/logit buffers of the last stage.
#include "models/training_spec.hpp"

namespace trainsim {

struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, buffers = 0;  // bytes
  double total() const { return weights + gradients + optimizer + activations + buffers; }
};

// Activation bytes one layer keeps for backward, for one micro-batch on one rank.
double layer_activation_bytes(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train);

MemoryBreakdown stage_memory(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                             int stage);

}  // namespace trainsim
