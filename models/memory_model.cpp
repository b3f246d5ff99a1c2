#include "models/memory_model.hpp"

#include <algorithm>

#include "models/moe.hpp"
#include "models/pipedream.hpp"
#include "models/schedule.hpp"

namespace trainsim {

double layer_activation_bytes(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  const double t = p.tp;
  const double sbh = p.micro_batch * p.cp_local_tokens(tr.seq_len) * m.hidden;
  const bool sp = p.sequence_parallel && p.tp > 1;
  // e: bytes of one activation element (16-bit: 2; FP32 and TF32 training: 4).
  const double e = activation_element_bytes(tr);
  // Full recomputation keeps only the layer input: sharded over TP with SP or when the
  // checkpoints are distributed over the TP ranks.
  if (p.recompute == Recompute::Full) return e * sbh / (sp || p.distribute_saved_activations ? t : 1.0);
  const double h = m.hidden, a = m.heads, g = m.kv_heads, f = m.ffn_hidden;
  const double up = m.mlp == MlpKind::SwiGlu ? 2 : 1;
  // Per sbh, in bytes (16-bit tensors = 2, dropout masks = 1). Korthikanti et al. 2022 §4.1.
  // GEMM inputs kept for the weight gradient are FP8 (1 byte) under FP8 training
  // (Transformer Engine saves the cast copy).
  const double lin = tr.precision == Dtype::FP8 ? 1 : e;
  const double mask = tr.dropout ? 1 : 0;
  // Replicated across TP unless SP: norm inputs, QKV / MLP inputs, dropout masks.
  const double replicated = (e + lin + mask) + (e + lin + mask);
  // Sharded across TP: Q, K, V, attention output (the projection's input); MLP up
  // outputs (activation input) and activation output (the down projection's input).
  const double sharded = (e + 2 * e * g / a + lin) + (e * f * up / h + lin * f / h);
  // Attention scores (softmax output, dropout mask and output): 5 a s / h, unless
  // fused attention or selective recomputation avoids storing them.
  const bool scores_kept = tr.attention == AttentionKind::Unfused && p.recompute == Recompute::None;
  // Without dropout the softmax output is the tensor the AV product keeps: one copy.
  const double kept = tr.dropout ? 2 * e + mask : e;
  const double scores = scores_kept ? kept * a * p.cp_local_tokens(tr.seq_len) / h : 0.0;
  return sbh * ((sp ? replicated / t : replicated) + (sharded + scores) / t);
}

double layer_weight_input_bytes(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  const double t = p.tp;
  const double sbh = p.micro_batch * p.cp_local_tokens(tr.seq_len) * m.hidden;
  const bool sp = p.sequence_parallel && p.tp > 1;
  const double lin = tr.precision == Dtype::FP8 ? 1 : activation_element_bytes(tr);
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
  // A unit of seq1F1B holds one sequence chunk: the activations of seq_len / seq_chunks tokens.
  TrainingSpec unit_tr = tr;
  unit_tr.seq_len = tr.seq_len / p.seq_chunks;
  const int chunks = sched.chunks_on(stage);
  const int last_v = sched.part_of(sched.chunks() - 1);
  // Per layer kind: activation bytes one layer keeps, and the weight-gradient inputs among them.
  auto activation_of = [&](LayerKind k) {
    switch (k) {
      case LayerKind::Dense:
        return ChunkActivation{layer_activation_bytes(m, p, unit_tr), layer_weight_input_bytes(m, p, unit_tr)};
      case LayerKind::Moe:
        return moe_layer_activation(m, p, unit_tr);
    }
    return ChunkActivation{};
  };
  // `one_chunk`: a chunk holds both the embedding and the LM head, so a tied output weight
  // is the embedding itself; on different chunks of one rank (V placements) each chunk
  // keeps its copy, as Megatron-LM's model chunks do (the planner reduces and steps both).
  bool first = false, last = false, one_chunk = false;
  double params = 0;
  // MoE layers: their replicated part and the routed experts of this rank (already per rank).
  double moe_dense = 0, expert = 0;
  const MoeLayerParams moe_layer = m.moe.enabled() ? moe_layer_params_per_rank(m, p) : MoeLayerParams{};
  for (int c = 0; c < chunks; ++c) {
    const int v = sched.part_of(sched.virtual_stage(stage, c));  // the layer block (DualPipe: of either copy)
    first |= v == first_virtual_stage;
    last |= v == last_v;
    one_chunk |= v == first_virtual_stage && v == last_v;
    const int l0 = p.first_layer_of_virtual_stage(v, m.layers);
    for (int l = l0; l < l0 + p.layers_of_virtual_stage(v, m.layers); ++l) {
      if (m.layer_kind(l) == LayerKind::Moe) {
        moe_dense += moe_layer.dense;
        expert += moe_layer.expert;
      } else {
        params += m.params_per_layer_per_tp_rank(p.tp);
      }
    }
  }
  params += moe_dense;
  const bool mtp = last && m.mtp_depth > 0;
  const bool mtp_moe = m.layer_kind(m.layers - 1) == LayerKind::Moe;
  if (mtp) {
    // Multi-token prediction modules: projection and norms (on every TP rank)
    // and one block of the last layer's kind each; embedding and head shared.
    const double h = m.hidden;
    params += m.mtp_depth * (2 * h * h + 2 * h + (mtp_moe ? moe_layer.dense : m.params_per_layer_per_tp_rank(p.tp)));
    if (mtp_moe) expert += m.mtp_depth * moe_layer.expert;
  }
  if (first) params += m.embedding_params_per_tp_rank(p.tp);
  if (last && (!m.tied_embeddings || !one_chunk)) params += static_cast<double>(m.vocab) * m.hidden / p.tp;
  const double dp_group = static_cast<double>(p.dp) * p.cp;
  const double shard_opt = p.zero >= 1 ? dp_group : 1.0;
  const double shard_grad = p.zero >= 2 ? dp_group : 1.0;
  const double shard_weight = p.zero >= 3 ? dp_group : 1.0;
  // 16-bit weights beside the fp32 master copy; FP32 training holds only fp32 weights.
  const double weight_bytes = activation_element_bytes(tr);
  mem.weights = params * weight_bytes / shard_weight;
  mem.gradients = params * tr.grad_reduce_bytes / shard_grad;
  const double opt_bytes = optimizer_bytes_per_param(tr);
  mem.optimizer = params * opt_bytes / shard_opt;
  if (tr.optimizer == "muon") {
    // The embedding and the head are updated by AdamW (second moment: 4 B more).
    double adamw = first ? m.embedding_params_per_tp_rank(p.tp) : 0.0;
    if (last && (!m.tied_embeddings || !one_chunk)) adamw += static_cast<double>(m.vocab) * m.hidden / p.tp;
    mem.optimizer += adamw * 4 / shard_opt;
  }
  if (expert > 0) {
    // Routed experts: replicated over the expert data-parallel group only.
    const double edp = expert_dp(p);
    mem.weights += expert * weight_bytes / (p.zero >= 3 ? edp : 1.0);
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
  // FP8 primary weights: FP8 data and its cached transpose (2 B, as the 16-bit weights
  // counted above); a bf16-state optimizer keeps its own 16-bit master of their shard, which
  // the 16-bit parameters were before (NeMo's distributed Adam stores the fragment).
  if (tr.fp8_params && tr.bf16_optimizer_state) {
    int layers = 0;
    for (int c = 0; c < chunks; ++c)
      layers += p.layers_of_virtual_stage(sched.part_of(sched.virtual_stage(stage, c)), m.layers);
    mem.optimizer += layers * m.linear_weights_per_layer_per_tp_rank(p.tp) * 2 / shard_opt;
  }
  // Deferred output-layer weight gradients: the last stage keeps each deferred micro-batch's
  // logit gradient (tokens x vocab / tp) and the output layer's input (sequence-sharded with
  // SP) until the pipeline flush; counted whole, an upper bound at the activations' peak.
  if (last && tr.defer_embedding_wgrad) {
    const int mbs = p.micro_batches();
    const int kept = tr.wgrad_deferral_limit > 0 ? std::min(tr.wgrad_deferral_limit, mbs) : mbs;
    const double tokens = p.micro_batch * p.cp_local_tokens(tr.seq_len);
    const double e = activation_element_bytes(tr);
    mem.buffers +=
        kept * tokens * e * (static_cast<double>(m.vocab) / p.tp + m.hidden / (p.sequence_parallel ? p.tp : 1.0));
  }
  // PipeDream's weight stashing and PipeDream-2BW's double buffer: more
  // versions of the 16-bit weights the forwards read (models/pipedream.hpp).
  mem.weights *= weight_versions(p.schedule, p.pp, stage);
  if (p.zero >= 3 && dp_group > 1)
    mem.buffers += 2 * 2 * m.params_per_layer_per_tp_rank(p.tp);  // gathered layer + prefetch
  if (p.cp_ring() > 1) {
    // Ring CP: the K and V of the whole sequence gathered for one layer (of the heads
    // this rank attends to after any Ulysses all-to-all), and their gradient before
    // the reduce-scatter. Ulysses' all-to-all buffers are the size of the rank's own
    // Q, K, V shard, already counted in its activations.
    const double kv_heads =
        m.mla.enabled() ? static_cast<double>(m.heads) / p.tp : std::max(1.0, static_cast<double>(m.kv_heads) / p.tp);
    const double heads = std::max(1.0, kv_heads / p.cp_ulysses);
    mem.buffers += 2 * static_cast<double>(p.micro_batch) * tr.seq_len * 2 * heads * m.head_dim() * 2;
  }

  // Activations in flight: each forward unit adds its chunk's activations, its
  // backward frees them (B keeps the weight-gradient inputs until W).
  const double tokens = p.micro_batch * p.cp_local_tokens(unit_tr.seq_len);
  // The embedding output and its dropout mask (1 B).
  const double embedding_out =
      tokens * m.hidden * (activation_element_bytes(unit_tr) + 1) / (p.sequence_parallel ? p.tp : 1);
  // A multi-token prediction module keeps its block's activations (never
  // recomputed) and the concatenated 2h input of its projection.
  ChunkActivation mtp_act;
  if (mtp) {
    ParallelSpec kept = p;
    kept.recompute = Recompute::None;
    const ChunkActivation block =
        mtp_moe ? moe_layer_activation(m, kept, tr)
                : ChunkActivation{layer_activation_bytes(m, kept, tr), layer_weight_input_bytes(m, kept, tr)};
    const double proj_in = tokens * 2 * m.hidden * activation_element_bytes(tr) / (p.sequence_parallel ? p.tp : 1);
    mtp_act = ChunkActivation{m.mtp_depth * (block.total + proj_in), m.mtp_depth * (block.after_input + proj_in)};
  }
  mem.activations = peak_activation_bytes(sched, stage, [&](int c) {
    const int v = sched.part_of(sched.virtual_stage(stage, c));  // the layer block (DualPipe: of either copy)
    ChunkActivation a{v == first_virtual_stage ? embedding_out : 0.0, 0.0};
    if (v == last_v) {
      a.total += mtp_act.total;
      a.after_input += mtp_act.after_input;
    }
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
    mem.activations += layer_activation_bytes(m, none, unit_tr);
  }
  if (last) {
    // Logits and fp32 loss input of the LM head and of each prediction module.
    mem.buffers +=
        (1 + m.mtp_depth) * tokens * static_cast<double>(m.vocab) / p.tp * (activation_element_bytes(tr) + 4);
  }
  // Offload: one layer's activations on their way to the host and one on the way back.
  if (p.offload_layers > 0) mem.buffers += 2 * layer_activation_bytes(m, p, tr);
  return mem;
}

double optimizer_bytes_per_param(const TrainingSpec& tr) {
  // fp32 master weights (none in FP32 training: the weights are the master
  // copy), plus: SGD its momentum (Muon too, + AdamW's v for the embedding and
  // head, elsewhere); Adam (fused or not) and LAMB m and v; Adafactor (factored, no first
  // moment) only row and column statistics, negligible next to the matrix.
  // bf16 Adam state (apex DistributedFusedAdam with dtype bf16 and store_params false):
  // m and v in bf16, the 16-bit weights are the parameters themselves.
  if (tr.bf16_optimizer_state) return 4.0;
  const double master = activation_element_bytes(tr) >= 4 ? 0.0 : 4.0;
  if (tr.optimizer == "sgd" || tr.optimizer == "muon") return master + 4.0;
  if (tr.optimizer == "adafactor") return master;
  return master + 8.0;
}

double checkpoint_bytes(const TransformerSpec& model, const TrainingSpec& tr) {
  // Weights as stage_memory counts them (16-bit, or fp32 in FP32 training).
  return model.total_params() * (activation_element_bytes(tr) + optimizer_bytes_per_param(tr));
}

}  // namespace trainsim
