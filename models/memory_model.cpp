#include "models/memory_model.hpp"

#include <algorithm>

#include "models/moe.hpp"
#include "models/schedule.hpp"

namespace trainsim {

double layer_activation_bytes(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  const double t = p.tp;
  const double sbh = static_cast<double>(p.micro_batch) * tr.seq_len / p.cp * m.hidden;
  const bool sp = p.sequence_parallel && p.tp > 1;
  // Full recomputation keeps only the layer input: sharded over TP with SP or when the
  // checkpoints are distributed over the TP ranks.
  if (p.recompute == Recompute::Full) return 2 * sbh / (sp || p.distribute_saved_activations ? t : 1.0);
  const double h = m.hidden, a = m.heads, g = m.kv_heads, f = m.ffn_hidden;
  const double up = m.mlp == MlpKind::SwiGlu ? 2 : 1;
  // Per sbh, in bytes (16-bit tensors = 2, dropout masks = 1). Korthikanti et al. 2022 §4.1.
  // GEMM inputs kept for the weight gradient are FP8 (1 byte) under FP8 training
  // (Transformer Engine saves the cast copy).
  const double lin = tr.precision == Dtype::FP8 ? 1 : 2;
  const double mask = tr.dropout ? 1 : 0;
  // Replicated across TP unless SP: norm inputs, QKV / MLP inputs, dropout masks.
  const double replicated = (2 + lin + mask) + (2 + lin + mask);
  // Sharded across TP: Q, K, V, attention output (the projection's input); MLP up
  // outputs (activation input) and activation output (the down projection's input).
  const double sharded = (2 + 4 * g / a + lin) + (2 * f * up / h + lin * f / h);
  // Attention scores (softmax output, dropout mask and output): 5 a s / h, unless
  // fused attention or selective recomputation avoids storing them.
  const bool scores_kept = tr.attention == AttentionKind::Unfused && p.recompute == Recompute::None;
  const double scores = scores_kept ? (4 + mask) * a * (static_cast<double>(tr.seq_len) / p.cp) / h : 0.0;
  return sbh * ((sp ? replicated / t : replicated) + (sharded + scores) / t);
}

double layer_weight_input_bytes(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  const double t = p.tp;
  const double sbh = static_cast<double>(p.micro_batch) * tr.seq_len / p.cp * m.hidden;
  const bool sp = p.sequence_parallel && p.tp > 1;
  const double lin = tr.precision == Dtype::FP8 ? 1 : 2;
  // QKV and MLP-up inputs (replicated unless SP), attention-projection and
  // MLP-down inputs (sharded), as counted in layer_activation_bytes.
  const double replicated = 2 * lin;
  const double sharded = lin + lin * static_cast<double>(m.ffn_hidden) / m.hidden;
  return sbh * ((sp ? replicated / t : replicated) + sharded / t);
}

namespace {

// A MoE layer keeps the dense layer's attention and norm activations, its
// shared experts' as a dense MLP of their size, the router's fp32 scores, the
// permuted tokens for unpermutation, and on the busiest rank the routed
// tokens' expert inputs and intermediate activations (models/moe.hpp).
ChunkActivation moe_layer_activation(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  TransformerSpec shared = m;
  shared.ffn_hidden = m.moe.shared_experts * m.moe.shared_ffn;
  ChunkActivation a{layer_activation_bytes(shared, p, tr), layer_weight_input_bytes(shared, p, tr)};
  const RoutedTokens rt = routed_tokens(m, p, tr);
  const double lin = tr.precision == Dtype::FP8 ? 1 : 2;
  const double up = m.mlp == MlpKind::SwiGlu ? 2 : 1;
  const double tokens = rt.max_rank_tokens * expert_tp(p);
  const double f_e = static_cast<double>(m.moe.expert_ffn) / expert_tp(p);
  a.after_input += tokens * (m.hidden + f_e) * lin;  // re-created by B under full recomputation
  if (p.recompute == Recompute::Full) return a;
  a.total += tokens * (m.hidden * lin + f_e * (2 * up + lin)) + rt.tokens_in * m.moe.experts * 4 +
             rt.tokens_in * m.moe.top_k * m.hidden * 2.0;
  return a;
}

}  // namespace

MemoryBreakdown stage_memory(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr, int stage) {
  return stage_memory(m, p, tr, schedule_of(p), stage);
}

MemoryBreakdown stage_memory(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr,
                             const PipelineSchedule& sched, int stage, int first_virtual_stage) {
  MemoryBreakdown mem;
  const int chunks = sched.chunks_on(stage);
  const int last_v = sched.chunks() - 1;
  // Per layer kind: activation bytes one layer keeps, and the weight-gradient inputs among them.
  auto activation_of = [&](LayerKind k) {
    switch (k) {
      case LayerKind::Dense:
        return ChunkActivation{layer_activation_bytes(m, p, tr), layer_weight_input_bytes(m, p, tr)};
      case LayerKind::Moe:
        return moe_layer_activation(m, p, tr);
    }
    return ChunkActivation{};
  };
  bool first = false, last = false;
  double params = 0;
  // MoE layers: their replicated part and the routed experts of this rank (already per rank).
  double moe_dense = 0, expert = 0;
  const MoeLayerParams moe_layer = m.moe.enabled() ? moe_layer_params_per_rank(m, p) : MoeLayerParams{};
  for (int c = 0; c < chunks; ++c) {
    const int v = sched.virtual_stage(stage, c);
    first |= v == first_virtual_stage;
    last |= v == last_v;
    const int l0 = p.first_layer_of_virtual_stage(v, m.layers);
    for (int l = l0; l < l0 + p.layers_of_virtual_stage(v, m.layers); ++l) {
      if (m.layer_kind(l) == LayerKind::Moe) {
        moe_dense += moe_layer.dense;
        expert += moe_layer.expert;
      } else {
        params += m.params_of_kind(m.layer_kind(l));
      }
    }
  }
  params = params / p.tp + moe_dense;
  if (first) params += m.embedding_params() / p.tp;
  if (last && (!m.tied_embeddings || !first)) params += static_cast<double>(m.vocab) * m.hidden / p.tp;
  const double dp_group = static_cast<double>(p.dp) * p.cp;
  const double shard_opt = p.zero >= 1 ? dp_group : 1.0;
  const double shard_grad = p.zero >= 2 ? dp_group : 1.0;
  const double shard_weight = p.zero >= 3 ? dp_group : 1.0;
  mem.weights = params * 2 / shard_weight;
  mem.gradients = params * tr.grad_reduce_bytes / shard_grad;
  const double opt_bytes = optimizer_bytes_per_param(tr);
  mem.optimizer = params * opt_bytes / shard_opt;
  if (tr.optimizer == "muon") {
    // The embedding and the head are updated by AdamW (second moment: 4 B more).
    double adamw = first ? m.embedding_params() / p.tp : 0.0;
    if (last && (!m.tied_embeddings || !first)) adamw += static_cast<double>(m.vocab) * m.hidden / p.tp;
    mem.optimizer += adamw * 4 / shard_opt;
  }
  if (expert > 0) {
    // Routed experts: replicated over the expert data-parallel group only.
    const double edp = expert_dp(p);
    mem.weights += expert * 2 / (p.zero >= 3 ? edp : 1.0);
    mem.gradients += expert * tr.grad_reduce_bytes / (p.zero >= 2 ? edp : 1.0);
    mem.optimizer += expert * opt_bytes / (p.zero >= 1 ? edp : 1.0);
    // Receive buffers of the token dispatch and combine on the busiest rank
    // (allgather dispatcher: every EP rank's tokens).
    const RoutedTokens rt = routed_tokens(m, p, tr);
    const double routed = rt.max_rank_tokens * expert_tp(p);
    const double received =
        p.moe_dispatcher == MoeDispatcher::AllGather ? std::max(routed, p.ep * rt.tokens_in) : routed;
    mem.buffers += 2 * received * m.hidden * 2.0;
  }
  if (p.zero >= 3 && dp_group > 1) mem.buffers += 2 * 2 * m.params_per_layer() / p.tp;  // gathered layer + prefetch

  // Activations in flight: each forward unit adds its chunk's activations, its
  // backward frees them (B keeps the weight-gradient inputs until W).
  const double tokens = static_cast<double>(p.micro_batch) * tr.seq_len / p.cp;
  const double embedding_out = tokens * m.hidden * 3 / (p.sequence_parallel ? p.tp : 1);
  mem.activations = peak_activation_bytes(sched, stage, [&](int c) {
    const int v = sched.virtual_stage(stage, c);
    ChunkActivation a{v == first_virtual_stage ? embedding_out : 0.0, 0.0};
    const int l0 = p.first_layer_of_virtual_stage(v, m.layers);
    // Offloaded layers keep their activations in host memory (buffers below).
    for (int l = l0 + std::min(p.offload_layers, p.layers_of_virtual_stage(v, m.layers));
         l < l0 + p.layers_of_virtual_stage(v, m.layers); ++l) {
      const ChunkActivation layer = activation_of(m.layer_kind(l));
      a.total += layer.total;
      a.after_input += layer.after_input;
    }
    return a;
  });
  if (p.recompute == Recompute::Full) {
    // One layer's full activations are live while it is recomputed.
    ParallelSpec none = p;
    none.recompute = Recompute::None;
    mem.activations += layer_activation_bytes(m, none, tr);
  }
  if (last) mem.buffers += tokens * static_cast<double>(m.vocab) / p.tp * (2 + 4);  // logits + fp32 loss input
  // Offload: one layer's activations on their way to the host and one on the way back.
  if (p.offload_layers > 0) mem.buffers += 2 * layer_activation_bytes(m, p, tr);
  return mem;
}

double optimizer_bytes_per_param(const TrainingSpec& tr) {
  // fp32 master weights, plus: SGD its momentum; Adam and LAMB m and v;
  // Adafactor (factored, no first moment) only row and column statistics,
  // which are negligible next to the matrix.
  if (tr.optimizer == "sgd" || tr.optimizer == "muon") return 8.0;  // Muon: momentum only (+ AdamW's v below)
  if (tr.optimizer == "adafactor") return 4.0;
  return 12.0;
}

double checkpoint_bytes(const TransformerSpec& model, const TrainingSpec& tr) {
  constexpr double kWeightBytes = 2;  // 16-bit weights, as stage_memory counts
  return model.total_params() * (kWeightBytes + optimizer_bytes_per_param(tr));
}

}  // namespace trainsim
