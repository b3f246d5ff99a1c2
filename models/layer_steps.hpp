#pragma once
// One transformer layer (and the embedding / LM head) as ordered steps for one
// tensor-parallel rank: compute kernels and TP/CP collectives, for forward,
// backward-input (B) and backward-weight (W). Steps name the earlier
// collectives they must wait for, so async communication overlaps where
// Megatron-LM overlaps it (e.g. the input-gradient all-reduce with wgrad).
#include <array>
#include <string>
#include <vector>

#include "models/training_spec.hpp"
#include "sim/compute_op.hpp"
#include "sim/program.hpp"

namespace trainsim {

enum class Pass : std::uint8_t { Forward, BackwardInput, BackwardWeight };

struct Step {
  bool is_comm = false;
  Pass pass = Pass::Forward;
  ComputeOp op;                 // when !is_comm
  CollectiveKind collective{};  // when is_comm
  CommClass comm_class = CommClass::TP;
  double bytes = 0;  // collective buffer bytes
  std::string name;
  double model_flops = 0;         // FLOPs by the Megatron-LM counting convention
  std::vector<int> waits;         // indices of earlier comm steps whose result this step needs
  bool overlap_previous = false;  // comm: start with the compute step before it (overlapped TP comm)
  bool expert_tp_group = false;   // comm of class EP on the expert tensor-parallel group (else the EP group)
  int matrix = -1;                // all-to-all-v: index into ModelSteps::traffic of its per-pair bytes
  // comm of class CP under hybrid context parallelism (cp_ulysses between 1 and
  // cp): the Ulysses all-to-all group or the ring group (else the whole CP group).
  enum class CpGroup : std::uint8_t { All, Ulysses, Ring } cp_group = CpGroup::All;
};

struct LayerSteps {
  std::vector<Step> forward;        // one layer's forward
  std::vector<Step> backward;       // one layer's backward (B and W steps interleaved in issue order)
  std::vector<Step> recompute;      // re-run before backward (full: the forward; selective: attention core)
  double grad_elements = 0;         // gradient elements of one such layer on one TP rank, reduced over dp*cp
  double expert_grad_elements = 0;  // routed-expert gradient elements on one rank, reduced over edp
};

struct ModelSteps {
  std::array<LayerSteps, kNumLayerKinds> by_kind;  // the steps of each layer kind
  const LayerSteps& of(LayerKind k) const { return by_kind[static_cast<std::size_t>(k)]; }
  // MoE layers under per-micro-batch routing draws: micro-batch m runs
  // moe_draws[m % size] (by_kind holds draw 0); empty when every micro-batch routes alike.
  std::vector<LayerSteps> moe_draws;
  const LayerSteps& of(LayerKind k, int microbatch) const {
    if (k != LayerKind::Moe || moe_draws.empty() || microbatch < 0) return of(k);
    return moe_draws[static_cast<std::size_t>(microbatch) % moe_draws.size()];
  }
  // Per-pair bytes of the all-to-all-v steps (Step::matrix), bytes[i * n + j]
  // from EP rank i to EP rank j.
  std::vector<std::vector<double>> traffic;
  std::vector<Step> embedding_forward, embedding_backward;  // first pipeline stage
  std::vector<Step> head_forward, head_backward;            // last stage: final norm, LM head, loss
  // Last stage, after the micro-batch's whole backward on the stage: the trainer's
  // training-metric cross-entropies over the logits (TrainingSpec::metric_cross_entropies).
  std::vector<Step> head_after_backward;
  // TrainingSpec::defer_embedding_wgrad: the head's backward of a deferred micro-batch
  // (no input re-gather, no weight-gradient GEMM), and what the pipeline flush runs per
  // deferred micro-batch: the sequence-parallel input's all-gather (empty without SP)
  // and the output layer's weight-gradient GEMM.
  std::vector<Step> head_backward_deferred, head_wgrad_gather, head_wgrad_gemm;
  double embedding_grad_elements = 0, head_grad_elements = 0;
  // The output weight's share of head_grad_elements (vocab x hidden / tp): with tied
  // embeddings on the embedding's own chunk it is the word embedding, one parameter.
  double head_weight_elements = 0;
  double head_expert_grad_elements = 0;  // routed experts of multi-token prediction blocks, reduced over edp
};

// seq1F1B's sequence chunk `index` of `count` (ParallelSpec::seq_chunks): the steps of
// seq_len / count tokens whose attention reads the keys of chunks 0..index.
struct SequenceChunk {
  int index = 0;
  int count = 1;
};

// `ep_node[x]`: the node of EP rank x of an expert-parallel group (the deepep
// dispatcher forwards inside nodes); empty: the whole group on one node.
ModelSteps build_model_steps(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                             const std::vector<int>& ep_node = {}, SequenceChunk chunk = {});

// The quantisation kernels in front of one FP8 GEMM under a recipe: HBM bytes per
// element of the 16-bit input and launches (docs/frameworks.md, "FP8 recipes").
struct Fp8Quantize {
  double bytes_per_element = 4;
  int kernels = 1;
};
Fp8Quantize fp8_quantize_cost(Fp8Recipe r);

// Transformer Engine keeps the FP8 copy of each GEMM weight (row-wise and transposed)
// for a whole step: Megatron-Core marks the step's first micro-batch
// (set_is_first_microbatch), on which the modules quantise their 16-bit weights; the
// later micro-batches reuse the copies (docs/frameworks.md, "FP8 weight casts"). The
// cost of that once-per-step cast of one layer's weights: HBM bytes per weight element
// and launches per layer (four GEMM weights: QKV, projection, MLP input and output).
// Zero where the framework keeps no such cache (`megatron-te` in FP8 only).
struct Fp8WeightCast {
  double bytes_per_element = 0;
  int kernels_per_layer = 0;
  MemoryKernel kernel = MemoryKernel::Generic;  // fp8_cast_kernel
};
Fp8WeightCast fp8_weight_cast(const TrainingSpec& train);

// The implementation of the FP8 quantisation kernels, for the profile's measured speed
// of it (`memory_kernels`): Transformer Engine's cast-transpose under delayed or current
// scaling (the `megatron-te` framework), else the memory-bound curve as it is.
MemoryKernel fp8_cast_kernel(const TrainingSpec& train);

// Transformer Engine's LayerNormLinear (the QKV and MLP input projections of the
// `megatron-te` layers) in FP8 under delayed scaling: the norm writes its output in FP8,
// sequence parallelism all-gathers it in FP8, the GEMM reads it without a cast, and the
// backward transposes the FP8 copy for the weight gradient (docs/frameworks.md, "FP8 recipes").
bool te_norm_fp8_output(const TrainingSpec& train);

// Transformer Engine's row-parallel Linear (the attention and MLP output projections of the
// `megatron-te` layers) in FP8 under delayed scaling with sequence parallelism: the backward
// casts the local output gradient to FP8 before gathering it, the gather (or the userbuffers
// ring exchange) moves FP8, and the weight gradient reads an FP8 transpose of the gathered
// tensor (docs/frameworks.md, "FP8 recipes").
bool te_fp8_gradient_gather(const TrainingSpec& train);

// PyTorch FSDP (FSDP1: the `eager` and `torch-compile` frameworks under ZeRO-3 with
// more than one data-parallel rank) turns each sharded unit's gradient into its
// reduce-scatter input in passes over the unit's unsharded elements, per micro-batch:
// autograd's cat of the parameters' gradients into the flat gradient, the cast to the
// reduction dtype and the pre-division, then the post-division of the shard
// (docs/frameworks.md, "FSDP's gradient passes"). Zero bytes and kernels elsewhere.
struct FsdpGradientPasses {
  double bytes_per_element = 0;  // HBM bytes per element of the unit's unsharded gradient
  int kernels = 0;
};
FsdpGradientPasses fsdp_gradient_passes(const TrainingSpec& train, const ParallelSpec& par);

// Muon's Newton-Schulz orthogonalisation (Jordan et al. 2024, kellerjordan.github.io/posts/muon;
// Liu et al. 2025, "Muon is Scalable for LLM Training", arXiv:2502.16982): per weight
// matrix of one layer on one TP rank (its local shard, as stored: QKV and the MLP
// input fused), kMuonNewtonSchulzSteps iterations of X <- aX + (bA + cA^2)X with
// A = X X^T, for the m x n matrix (m <= n): 4 m^2 n + 2 m^3 FLOPs, three GEMMs.
inline constexpr int kMuonNewtonSchulzSteps = 5;  // Muon's ns_steps default
struct MuonMatrix {
  std::string name;
  double rows = 0, cols = 0;
};
std::vector<MuonMatrix> muon_matrices(const TransformerSpec& model, const ParallelSpec& par);
// One op for that matrix in `layers` layers (bf16 GEMMs).
ComputeOp muon_newton_schulz_op(const MuonMatrix& w, int layers);

// Model FLOPs per iteration by the Megatron-LM convention (Narayanan et al.
// 2021, eq. 3 without recomputation), generalised to GQA, gated MLPs, MLA and
// MoE layers (router, top_k routed and the shared experts per token).
double model_flops_per_iteration(const TransformerSpec& model, const TrainingSpec& train, int global_batch);

}  // namespace trainsim
