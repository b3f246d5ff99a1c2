#pragma once
// Per-stage (MPMD) layouts: where each stage's ranks live, which sub-model and
// settings each stage runs, and the rules such a layout must meet. A stage's
// ranks are numbered tp fastest, then cp, then dp, from the stage's first GPU:
// the next free GPU of its node group (or of the cluster), stage by stage.
#include <vector>

#include "models/layout_rules.hpp"
#include "models/training_spec.hpp"

namespace trainsim {

// The tensor-parallel size of stage `s` (parallel.tp without per-stage layouts).
int stage_tp(const ParallelSpec& par, int s);
// The data-parallel size and micro-batch of stage `s` (parallel.dp and
// parallel.micro_batch unless the stage gives its own). Every stage runs the
// same samples per pipeline step, dp * micro_batch.
int stage_dp(const ParallelSpec& par, int s);
// The context-parallel (ring) size of stage `s` (parallel.cp unless the stage gives its own).
int stage_cp(const ParallelSpec& par, int s);
int stage_micro_batch(const ParallelSpec& par, int s);

// The first GPU of each stage; empty when a group (or the cluster) has too few GPUs.
std::vector<int> stage_first_gpus(const ParallelSpec& par, const ClusterSpec& cluster);

// What stage `s` runs: the sub-model (the encoder or the main model), the
// parallel spec of its program (tp, recomputation and the layer counts of that
// sub-model's stages, zero elsewhere) and the training spec (an encoder's
// sequence is its encoder_tokens).
struct StageProgramSpec {
  TransformerSpec model;
  ParallelSpec par;
  TrainingSpec train;
  int first_stage = 0;  // the sub-model's first stage: it runs the embedding
  bool encoder = false;
};
StageProgramSpec stage_program_spec(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                                    int s);

// Bytes of one activation (or its gradient) crossing the boundary after stage
// `s` for one sample, whole (before any split over CP or TP ranks).
double boundary_sample_bytes(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train, int s);

// The send/recv pattern on the boundary from stage `from` to the adjacent stage
// `to` (either direction: activations forward, their gradients back). Sender
// replica d of a stage with dp a and receiver replica e of one with dp b
// exchange the samples both hold (dp sizes divide one another, so a replica of
// the smaller dp talks to max/min replicas of the other); within a replica
// pair, CP sizes u and v split each sequence into max(u, v) pieces (the
// sizes divide one another), and TP x and y split each piece into max(x, y)
// with pp_scatter_gather or sequence_parallel. Every message has the same bytes.
struct BoundaryShape {
  int sends = 1;     // messages each sending rank posts per pipeline step
  int recvs = 1;     // messages each receiving rank takes per pipeline step
  int samples = 0;   // samples in one message (the replicas' overlap)
  double bytes = 0;  // bytes of one message
};
BoundaryShape boundary_shape(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train, int from,
                             int to);

// Problems of `parallel.stages` (and of a model with an encoder), each at its JSON pointer.
std::vector<LayoutProblem> check_stage_layouts(const TransformerSpec& model, const ParallelSpec& par,
                                               const TrainingSpec& train, const ClusterSpec& cluster);

}  // namespace trainsim
