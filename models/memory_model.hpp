#pragma once
// Peak memory of one pipeline rank: weights, gradients and optimizer states
// (mixed precision, ZeRO 0-3), activations of the micro-batches in flight,
// found by walking the rank's schedule units (Korthikanti et al. 2022,
// generalised to GQA and gated MLPs; SP, CP and recomputation), and the
// loss/logit buffers of the rank holding the LM head.
#include "models/schedule.hpp"
#include "models/training_spec.hpp"

namespace trainsim {

struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, buffers = 0;  // bytes
  double total() const { return weights + gradients + optimizer + activations + buffers; }
};

// Activation bytes one layer keeps for backward, for one micro-batch on one rank.
double layer_activation_bytes(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train);

// The inputs of the weight-gradient GEMMs of one layer: what a W unit still
// needs after its B unit (under full recomputation B re-creates them from the
// checkpoint, so they are the same bytes as without recomputation).
double layer_weight_input_bytes(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train);

// `first_virtual_stage`: the model chunk that holds the embedding (0; with an
// encoder sub-model, the model's first stage behind it, models/mpmd.hpp).
MemoryBreakdown stage_memory(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                             const PipelineSchedule& schedule, int stage, int first_virtual_stage = 0);
// The same under the parallel spec's own schedule (schedule_of(par)).
MemoryBreakdown stage_memory(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                             int stage);

// Bytes of optimizer state per parameter (fp32 master weights and the optimizer's moments).
double optimizer_bytes_per_param(const TrainingSpec& tr);
// One checkpoint of the whole model: the 16-bit weights and the optimizer state,
// as Megatron-style checkpoints hold them (what a restart reloads).
double checkpoint_bytes(const TransformerSpec& model, const TrainingSpec& tr);

}  // namespace trainsim
