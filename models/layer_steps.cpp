#include "models/layer_steps.hpp"

#include <algorithm>
#include <utility>

#include "models/moe.hpp"
#include "sim/check.hpp"

namespace trainsim {

namespace {

constexpr double kActBytes = 2;  // activations are kept in 16-bit even when GEMMs run in FP8

}  // namespace

Fp8Quantize fp8_quantize_cost(Fp8Recipe r) {
  // Bytes per element of the 16-bit input: read 2 B, write the FP8 copy the GEMM reads
  // (1 B) and the transposed / column-wise copy the weight-gradient GEMM reads (1 B),
  // plus their scales. Transformer Engine (github.com/NVIDIA/TransformerEngine):
  switch (r) {
    case Fp8Recipe::Delayed:
      // DelayedScaling: the scale comes from the amax history, so one fused
      // cast-transpose kernel quantises and records the amax (cast_transpose with amax).
      return {4.0, 1};
    case Fp8Recipe::Current:
      // Float8CurrentScaling: the scale needs this tensor's amax first: an amax kernel
      // (read 2 B), the scale from it (one tiny kernel), then the cast-transpose.
      return {6.0, 3};
    case Fp8Recipe::Mxfp8:
      // MXFP8BlockScaling: one kernel writes the row-wise and the column-wise copy,
      // each with one E8M0 scale byte per 32 elements (the block amax in registers).
      return {2.0 + 2 * (1.0 + 1.0 / 32), 1};
    case Fp8Recipe::Blockwise:
      // Float8BlockScaling: 1x128 tiles with an fp32 scale each, row-wise and column-wise.
      return {2.0 + 2 * (1.0 + 4.0 / 128), 1};
  }
  return {4.0, 1};
}

namespace {

// Appends steps to one list and keeps track of the last collective, so that the
// common case ("the next step needs the last collective's result") is one call.
class StepList {
 public:
  StepList(std::vector<Step>* out, Pass pass, Fp8Recipe recipe = Fp8Recipe::Delayed)
      : out_(out), pass_(pass), recipe_(recipe) {}
  void set_pass(Pass p) { pass_ = p; }

  // `model_flops` < 0: the GEMM's own FLOPs (MoE experts count balanced routing instead).
  int gemm(const std::string& name, Dtype dtype, double m, double n, double k, std::vector<int> waits = {},
           double count = 1, double model_flops = -1) {
    ComputeOp op;
    op.name = name;
    op.kind = OpKind::Gemm;
    op.dtype = dtype;
    op.m = static_cast<std::int64_t>(m);
    op.n = static_cast<std::int64_t>(n);
    op.k = static_cast<std::int64_t>(k);
    op.flops = 2 * m * n * k * count;
    const double in_elem = dtype == Dtype::FP8 ? 1.0 : kActBytes;
    op.bytes = ((m * k + k * n) * in_elem + m * n * kActBytes) * count;  // output stays 16-bit
    const double flops = model_flops >= 0 ? model_flops : op.flops;
    const bool wgrad = name.size() > 6 && name.compare(name.size() - 6, 6, ".wgrad") == 0;
    if (dtype == Dtype::FP8 && !wgrad) {
      // Transformer Engine quantises the 16-bit input (activation, or output gradient
      // for dgrad) to FP8 with the copy the weight-gradient GEMM reads, as the recipe
      // says (fp8_quantize_cost). Weights are cast once per step (cached).
      const Fp8Quantize q = fp8_quantize_cost(recipe_);
      memory(name + ".fp8cast", m * k * count * q.bytes_per_element, std::move(waits), q.kernels);
      waits = {};
    }
    return add_compute(std::move(op), flops, std::move(waits));
  }
  int memory(const std::string& name, double bytes, std::vector<int> waits = {}, int kernels = 1) {
    ComputeOp op;
    op.name = name;
    op.kind = OpKind::MemoryBound;
    op.dtype = Dtype::BF16;
    op.bytes = bytes;
    op.kernels = kernels;
    return add_compute(std::move(op), 0, std::move(waits));
  }
  int attention(const std::string& name, Dtype dtype, double exec_flops, double model_flops, double bytes,
                std::vector<int> waits, bool backward, AttentionKind kind) {
    ComputeOp op;
    op.name = name;
    op.kind = backward ? OpKind::AttentionBackward : OpKind::Attention;
    op.attention_kernel = kind == AttentionKind::FlashTriton       ? AttentionKernel::Triton
                          : kind == AttentionKind::FlashAttention3 ? AttentionKernel::FlashAttention3
                          : kind == AttentionKind::Cudnn           ? AttentionKernel::Cudnn
                                                                   : AttentionKernel::FlashAttention2;
    op.dtype = dtype;
    op.flops = exec_flops;
    op.bytes = bytes;
    return add_compute(std::move(op), model_flops, std::move(waits));
  }
  int comm(const std::string& name, CollectiveKind kind, CommClass cls, double bytes, std::vector<int> waits = {},
           bool overlap_previous = false, bool expert_tp_group = false) {
    Step s;
    s.expert_tp_group = expert_tp_group;
    s.is_comm = true;
    s.overlap_previous = overlap_previous;
    s.pass = pass_;
    s.collective = kind;
    s.comm_class = cls;
    s.bytes = bytes;
    s.name = name;
    s.waits = std::move(waits);
    out_->push_back(std::move(s));
    return static_cast<int>(out_->size() - 1);
  }

 private:
  int add_compute(ComputeOp op, double model_flops, std::vector<int> waits) {
    Step s;
    s.pass = pass_;
    s.name = op.name;
    s.op = std::move(op);
    s.model_flops = model_flops;
    s.waits = std::move(waits);
    out_->push_back(std::move(s));
    return static_cast<int>(out_->size() - 1);
  }
  std::vector<Step>* out_;
  Pass pass_;
  Fp8Recipe recipe_;
};

std::vector<int> maybe(int idx) { return idx >= 0 ? std::vector<int>{idx} : std::vector<int>{}; }

struct Dims {
  double b, s_local, s_full, tokens, tokens_norm, h, d, a_t, g_t, f_t, up_mult, t;
  double d_out;  // per-head size of the attention output (MLA: the value head size; else d)
  int cp;
  bool sp, tp_comm, cp_comm, swiglu;
  bool alibi;
  Dtype gemm_dtype;
  bool dropout;
  Dtype attn_dtype;  // attention, LM head and memory-bound work: FP8 recipes keep these in BF16
  // Sliding-window attention: the query-key pairs a causal fused kernel computes, as a
  // share of full causal attention's, and the keys per query the model-FLOP count sees
  // (s_full without a window) as a share of s_full.
  double window_exec_share = 1, window_model_share = 1;
};

// A causal window of w keys over s positions: query i attends to min(i + 1, w) keys,
// s w - w (w - 1) / 2 pairs for w < s, against s (s + 1) / 2 without a window.
double windowed_pair_share(double s, double w) {
  if (w <= 0 || w >= s) return 1.0;
  return (s * w - w * (w - 1) / 2) / (s * (s + 1) / 2);
}

// Memory traffic (x the fused kernel's bytes) and launches of the elementwise, norm,
// cast and loss kernels a framework runs; docs/frameworks.md gives each list's source.
struct KernelRecipe {
  double norm = 1, norm_bwd = 1;  // RMSNorm/LayerNorm
  int norm_kernels = 1, norm_bwd_kernels = 1;
  double rope = 1, rope_bwd = 1;
  int rope_kernels = 1;
  double swiglu = 1, swiglu_bwd = 1;  // SwiGLU activation (GeLU is one kernel everywhere)
  int swiglu_kernels = 1, swiglu_bwd_kernels = 1;
  double residual_dropout = 1;  // dropout + residual add (no dropout: one add everywhere)
  int residual_dropout_kernels = 1;
  double xent = 1, xent_bwd = 1;  // cross-entropy over the vocabulary
  int xent_kernels = 1, xent_bwd_kernels = 1;
  bool weight_casts = false;   // fp32 master weights cast to 16 bits once per forward (AMP / FSDP2)
  bool casts_sharded = false;  // FSDP2: the cast runs on the 1/dp shard, before the all-gather, in both passes
};

KernelRecipe recipe_of(Framework f) {
  KernelRecipe r;
  if (f == Framework::TorchCompile) r.weight_casts = true;  // Inductor fuses the pointwise chains, not the casts
  if (f != Framework::Eager && f != Framework::Fsdp2) return r;
  // Eager PyTorch, op by op (Hugging Face LlamaRMSNorm, rotate_half RoPE, F.silu(gate) * up,
  // F.cross_entropy(logits.float())); bytes per element counted in docs/frameworks.md.
  r.norm = 9, r.norm_kernels = 8, r.norm_bwd = 9, r.norm_bwd_kernels = 12;
  r.rope = 5, r.rope_bwd = 5, r.rope_kernels = 10;
  r.swiglu = 10.0 / 6, r.swiglu_kernels = 2, r.swiglu_bwd = 18.0 / 10, r.swiglu_bwd_kernels = 3;
  r.residual_dropout = 11.0 / 7, r.residual_dropout_kernels = 2;
  r.xent = 18.0 / 10, r.xent_kernels = 3, r.xent_bwd = 22.0 / 6, r.xent_bwd_kernels = 4;
  r.weight_casts = true;
  r.casts_sharded = f == Framework::Fsdp2;
  return r;
}

Dims dims_of(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  Dims d{};
  d.t = p.tp;
  d.cp = p.cp;
  d.b = p.micro_batch;
  d.s_full = tr.seq_len;
  d.s_local = static_cast<double>(tr.seq_len) / p.cp;
  d.tokens = d.b * d.s_local;
  d.sp = p.sequence_parallel && p.tp > 1;
  d.tokens_norm = d.sp ? d.tokens / p.tp : d.tokens;
  d.h = m.hidden;
  d.d = m.head_dim();
  d.a_t = static_cast<double>(m.heads) / p.tp;
  d.g_t = std::max(1.0, static_cast<double>(m.kv_heads) / p.tp);
  d.f_t = static_cast<double>(m.ffn_hidden) / p.tp;
  d.swiglu = m.mlp == MlpKind::SwiGlu;
  d.alibi = m.alibi;
  d.up_mult = d.swiglu ? 2 : 1;
  d.tp_comm = p.tp > 1;
  d.cp_comm = p.cp > 1;
  d.gemm_dtype = tr.precision;
  d.dropout = tr.dropout;
  d.attn_dtype = tr.precision == Dtype::FP8 ? Dtype::BF16 : tr.precision;
  d.d_out = d.d;
  d.window_exec_share = windowed_pair_share(d.s_full, m.sliding_window);
  d.window_model_share = m.sliding_window > 0 ? std::min(1.0, m.sliding_window / d.s_full) : 1.0;
  if (m.mla.enabled()) {
    // MLA attends with per-head keys of qk_nope + qk_rope and values of v_head_dim:
    // QK^T and AV together cost what two products of their mean size cost.
    d.d = (m.mla.qk_nope_dim + m.mla.qk_rope_dim + m.mla.v_head_dim) / 2.0;
    d.d_out = m.mla.v_head_dim;
    d.g_t = d.a_t;  // keys and values are up-projected for every head
  }
  return d;
}

// MLA projections of one layer (DeepSeek-V2, arXiv:2405.04434, Section 2.1) in
// place of the QKV GEMM: the down-projections (replicated over TP, as
// Megatron-Core's MLA keeps them) with RMSNorms on the latents, the
// up-projections split by heads over TP.
void mla_projections_forward(StepList& L, const TransformerSpec& m, const Dims& D, std::vector<int> waits) {
  const MlaSpec& a = m.mla;
  const double qk = a.qk_nope_dim + a.qk_rope_dim;
  if (a.q_lora_rank > 0) {
    L.gemm("attn.q.down", D.gemm_dtype, D.tokens, a.q_lora_rank, D.h, std::move(waits));
    waits = {};
    L.memory("attn.q.norm", D.tokens * a.q_lora_rank * kActBytes * 2);
    L.gemm("attn.q.up", D.gemm_dtype, D.tokens, D.a_t * qk, a.q_lora_rank);
  } else {
    L.gemm("attn.q", D.gemm_dtype, D.tokens, D.a_t * qk, D.h, std::move(waits));
    waits = {};
  }
  L.gemm("attn.kv.down", D.gemm_dtype, D.tokens, a.kv_lora_rank + a.qk_rope_dim, D.h);
  L.memory("attn.kv.norm", D.tokens * a.kv_lora_rank * kActBytes * 2);
  L.gemm("attn.kv.up", D.gemm_dtype, D.tokens, D.a_t * (a.qk_nope_dim + a.v_head_dim), a.kv_lora_rank);
}

// Input gradients of the MLA projections (B); `waits` gate the first one.
void mla_projections_dgrad(StepList& L, const TransformerSpec& m, const Dims& D, std::vector<int> waits) {
  const MlaSpec& a = m.mla;
  const double qk = a.qk_nope_dim + a.qk_rope_dim;
  L.gemm("attn.kv.up.dgrad", D.gemm_dtype, D.tokens, a.kv_lora_rank, D.a_t * (a.qk_nope_dim + a.v_head_dim),
         std::move(waits));
  L.memory("attn.kv.norm.bwd", D.tokens * a.kv_lora_rank * kActBytes * 3);
  L.gemm("attn.kv.down.dgrad", D.gemm_dtype, D.tokens, D.h, a.kv_lora_rank + a.qk_rope_dim);
  if (a.q_lora_rank > 0) {
    L.gemm("attn.q.up.dgrad", D.gemm_dtype, D.tokens, a.q_lora_rank, D.a_t * qk);
    L.memory("attn.q.norm.bwd", D.tokens * a.q_lora_rank * kActBytes * 3);
    L.gemm("attn.q.down.dgrad", D.gemm_dtype, D.tokens, D.h, a.q_lora_rank);
  } else {
    L.gemm("attn.q.dgrad", D.gemm_dtype, D.tokens, D.h, D.a_t * qk);
  }
}

// Weight gradients of the MLA projections (W); `waits` gate the first one.
void mla_projections_wgrad(StepList& L, const TransformerSpec& m, const Dims& D, std::vector<int> waits) {
  const MlaSpec& a = m.mla;
  const double qk = a.qk_nope_dim + a.qk_rope_dim;
  L.gemm("attn.kv.up.wgrad", D.gemm_dtype, a.kv_lora_rank, D.a_t * (a.qk_nope_dim + a.v_head_dim), D.tokens,
         std::move(waits));
  L.gemm("attn.kv.down.wgrad", D.gemm_dtype, D.h, a.kv_lora_rank + a.qk_rope_dim, D.tokens);
  if (a.q_lora_rank > 0) {
    L.gemm("attn.q.up.wgrad", D.gemm_dtype, a.q_lora_rank, D.a_t * qk, D.tokens);
    L.gemm("attn.q.down.wgrad", D.gemm_dtype, D.h, a.q_lora_rank, D.tokens);
  } else {
    L.gemm("attn.q.wgrad", D.gemm_dtype, D.h, D.a_t * qk, D.tokens);
  }
}

// Attention core forward (flash: one fused kernel; unfused: QK^T, softmax, dropout, AV).
void attention_core_forward(StepList& L, const Dims& D, AttentionKind kind, std::vector<int> waits) {
  const double model = 4 * D.b * D.s_local * D.s_full * D.a_t * D.d;  // QK^T and AV, full (non-causal) count
  // ALiBi in a fused kernel (FlashAttention-2 from 2.4 takes the per-head
  // slopes and adds the bias in registers): no memory traffic of its own.
  if (kind != AttentionKind::Unfused) {
    const double bytes = (D.tokens * (2 * D.a_t * D.d) + D.b * D.s_full * 2 * D.g_t * D.d) * kActBytes;
    // causal: half the tiles run; a sliding window skips the tiles outside it
    // (FlashAttention-2's window_size, from version 2.3).
    L.attention("attn.core", D.attn_dtype, model / 2 * D.window_exec_share, model * D.window_model_share, bytes,
                std::move(waits), false, kind);
    return;
  }
  // Unfused attention computes every score and masks those outside the window.
  const double heads = D.b * D.a_t;
  const double scores = heads * D.s_local * D.s_full;
  if (D.alibi) {
    // Unfused ALiBi (BLOOM's Megatron-DeepSpeed): the [b*heads, 1, s] bias is
    // broadcast into the score buffer (write 2 B per score) that torch.baddbmm
    // then reads with beta = 1 (2 B per score) instead of beta = 0.
    L.memory("attn.alibi", scores * (2 + 2), waits);
    waits.clear();
  }
  L.gemm("attn.qk", D.attn_dtype, D.s_local, D.s_full, D.d, std::move(waits), heads);
  L.memory("attn.softmax", scores * (2 + 2));
  if (D.dropout) L.memory("attn.dropout", scores * (2 + 2 + 1));
  L.gemm("attn.av", D.attn_dtype, D.s_local, D.d, D.s_full, {}, heads);
}

// Attention core backward (flash: one fused kernel; unfused: the four GEMMs with
// the softmax and dropout gradients between them).
void attention_core_backward(StepList& L, const Dims& D, AttentionKind kind) {
  const double model_core = 4 * D.b * D.s_local * D.s_full * D.a_t * D.d;
  if (kind != AttentionKind::Unfused) {
    // FlashAttention backward: recomputes QK^T and runs four GEMMs (2.5x the forward work).
    const double bytes = (D.tokens * (4 * D.a_t * D.d) + D.b * D.s_full * 4 * D.g_t * D.d) * kActBytes;
    L.attention("attn.core.bwd", D.attn_dtype, 2.5 * model_core / 2 * D.window_exec_share,
                2 * model_core * D.window_model_share, bytes, {}, true, kind);
    return;
  }
  const double heads = D.b * D.a_t;
  const double scores = heads * D.s_local * D.s_full;
  L.gemm("attn.av.dgrad", D.attn_dtype, D.s_local, D.s_full, D.d, {}, heads);
  L.gemm("attn.av.wgrad", D.attn_dtype, D.s_full, D.d, D.s_local, {}, heads);
  if (D.dropout) L.memory("attn.dropout.bwd", scores * (2 + 1 + 2));
  L.memory("attn.softmax.bwd", scores * (2 + 2 + 2));
  L.gemm("attn.qk.dgrad", D.attn_dtype, D.s_local, D.d, D.s_full, {}, heads);
  L.gemm("attn.qk.wgrad", D.attn_dtype, D.s_full, D.d, D.s_local, {}, heads);
}

std::vector<int> maybe2(int a, int b) {
  std::vector<int> v = maybe(a);
  if (b >= 0) v.push_back(b);
  return v;
}

// Copies steps [from, to) of a dense list to `out`, re-indexing their waits;
// a wait outside the copied range is a bug in the slicing.
void append_slice(const std::vector<Step>& in, std::size_t from, std::size_t to, std::vector<Step>* out) {
  const long shift = static_cast<long>(out->size()) - static_cast<long>(from);
  for (std::size_t j = from; j < to; ++j) {
    Step s = in[j];
    for (int& w : s.waits) {
      TRAINSIM_CHECK(w >= static_cast<int>(from) && w < static_cast<int>(to),
                     "MoE layer: step " + s.name + " waits outside its block");
      w = static_cast<int>(w + shift);
    }
    out->push_back(std::move(s));
  }
}

// Full recomputation re-runs the layer's forward; with distributed checkpoints
// (Megatron-LM's CheckpointFunction, distribute_saved_activations) each TP rank
// kept 1/tp of the layer input and all-gathers it first.
std::vector<Step> full_recompute_of(const std::vector<Step>& forward, const ParallelSpec& p, const Dims& D) {
  if (!p.distribute_saved_activations || !D.tp_comm) return forward;
  std::vector<Step> out;
  StepList L(&out, Pass::Forward);
  const int ag = L.comm("tp.ag.checkpoint", CollectiveKind::AllGather, CommClass::TP, D.tokens * D.h * kActBytes);
  append_slice(forward, 0, forward.size(), &out);
  for (std::size_t j = 1; j < out.size(); ++j) {
    if (!out[j].is_comm) {
      out[j].waits.push_back(ag);
      break;
    }
  }
  return out;
}

std::size_t index_of(const std::vector<Step>& steps, const std::string& name) {
  for (std::size_t j = 0; j < steps.size(); ++j) {
    if (steps[j].name == name) return j;
  }
  TRAINSIM_CHECK(false, "dense layer has no step " + name);
  return 0;
}

// A MoE layer: the dense layer's attention block, then router, permutation,
// token dispatch (all-to-all over the EP group, all-gather over the expert TP
// group), the local experts as one grouped GEMM per projection sized by the
// busiest rank's tokens, combine, unpermutation and shared experts (Megatron-Core
// MoELayer with the alltoall token dispatcher; shared experts after the routed
// ones, its default without shared-expert overlap). Backward mirrors it.
void build_moe_layer(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr, const Dims& D,
                     const LayerSteps& dense, LayerSteps* moe) {
  const RoutedTokens rt = routed_tokens(m, p, tr);
  const double h = D.h, E = m.moe.experts, k = m.moe.top_k;
  const int etp = expert_tp(p);
  const double local = E / p.ep;
  const double f_e = static_cast<double>(m.moe.expert_ffn) / etp;
  const double busiest = rt.max_rank_tokens * etp;         // tokens the busiest rank's experts compute
  const double balanced = rt.balanced_rank_tokens * etp;   // the same without skew or drops (model FLOPs)
  const double m_e = busiest / local;                      // rows of one expert's GEMM
  const double recv = rt.max_rank_tokens * h * kActBytes;  // tokens the busiest rank receives
  const double send = rt.tokens_in * k * (1 - rt.dropped_fraction) * h * kActBytes;
  const double permuted = rt.tokens_in * k * h * kActBytes;  // permuted copies of the input tokens
  // alltoall: the larger of what a rank sends and what the busiest receives (the
  // slowest member paces it). allgather: every EP rank's tokens gathered on every
  // rank (the output buffer), the local experts' copies picked from them, and the
  // outputs reduce-scattered back; its traffic does not depend on routing.
  const bool allgather = p.moe_dispatcher == MoeDispatcher::AllGather;
  const double gathered = p.ep * rt.tokens_in * h * kActBytes;
  const double a2a = allgather ? gathered : std::max(send, recv);
  const CollectiveKind dispatch_kind = allgather ? CollectiveKind::AllGather : CollectiveKind::AllToAll;
  const CollectiveKind combine_kind = allgather ? CollectiveKind::ReduceScatter : CollectiveKind::AllToAll;
  const double permute_bytes = allgather ? gathered + recv : permuted * 2;
  const bool ep_comm = p.ep > 1, etp_comm = etp > 1;
  const double act = D.tokens * D.h * kActBytes, act_norm = D.tokens_norm * D.h * kActBytes;
  const auto tp_out_kind = D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  const double shared_f = static_cast<double>(m.moe.shared_experts) * m.moe.shared_ffn / p.tp;
  const double up = D.up_mult;
  auto expert_flops = [&](double n, double kk) { return 2 * balanced * n * kk; };

  // ---------------- forward ----------------
  append_slice(dense.forward, 0, index_of(dense.forward, "norm2") + 1, &moe->forward);
  {
    StepList L(&moe->forward, Pass::Forward, tr.fp8_recipe);
    L.gemm("moe.router", D.attn_dtype, rt.tokens_in, E, h);
    L.memory("moe.router.topk", rt.tokens_in * E * 4 * 3);  // fp32 scores: softmax / sigmoid, top-k
    if (!allgather) L.memory("moe.permute", permute_bytes);
    const int d = ep_comm ? L.comm("ep.dispatch", dispatch_kind, CommClass::EP, a2a) : -1;
    if (allgather) L.memory("moe.permute", permute_bytes, maybe(d));
    const int g =
        etp_comm ? L.comm("etp.ag.tokens", CollectiveKind::AllGather, CommClass::EP, etp * recv, maybe(d), false, true)
                 : -1;
    L.gemm("moe.expert.up", D.gemm_dtype, m_e, f_e * up, h, maybe2(d, g), local, expert_flops(f_e * up, h));
    L.memory("moe.expert.act", busiest * f_e * kActBytes * (D.swiglu ? 3 : 2));
    L.gemm("moe.expert.down", D.gemm_dtype, m_e, h, f_e, {}, local, expert_flops(h, f_e));
    const int rs =
        etp_comm ? L.comm("etp.rs.tokens", CollectiveKind::ReduceScatter, CommClass::EP, etp * recv, {}, false, true)
                 : -1;
    if (allgather) L.memory("moe.unpermute.local", permute_bytes);  // scatter the outputs into the gathered order
    const int c = ep_comm ? L.comm("ep.combine", combine_kind, CommClass::EP, a2a, maybe(rs)) : -1;
    int shared_out = -1;
    if (shared_f > 0) {
      const int ag = D.sp ? L.comm("tp.ag.shared", CollectiveKind::AllGather, CommClass::TP, act) : -1;
      L.gemm("moe.shared.up", D.gemm_dtype, D.tokens, shared_f * up, h, maybe2(ag, c));
      L.memory("moe.shared.act", D.tokens * shared_f * kActBytes * (D.swiglu ? 3 : 2));
      L.gemm("moe.shared.down", D.gemm_dtype, D.tokens, h, shared_f);
      shared_out = D.tp_comm ? L.comm("tp.shared.out", tp_out_kind, CommClass::TP, act) : -1;
    }
    L.memory("moe.unpermute", permuted * 2 + rt.tokens_in * h * kActBytes, maybe2(c, shared_out));
    L.memory("mlp.residual", act_norm * (D.dropout ? 3.5 : 3));
  }

  // ---------------- backward ----------------
  {
    StepList L(&moe->backward, Pass::BackwardInput, tr.fp8_recipe);
    const auto tp_in_kind = D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
    L.memory("mlp.residual.bwd", act_norm * 2);
    L.memory("moe.unpermute.bwd", permute_bytes);
    // The gradient of a reduce-scatter is an all-gather and vice versa.
    const int cb = ep_comm ? L.comm("ep.combine.bwd", dispatch_kind, CommClass::EP, a2a) : -1;
    const int g = etp_comm ? L.comm("etp.ag.tokens.grad", CollectiveKind::AllGather, CommClass::EP, etp * recv,
                                    maybe(cb), false, true)
                           : -1;
    const std::vector<int> arrived = maybe2(cb, g);
    L.gemm("moe.expert.down.dgrad", D.gemm_dtype, m_e, f_e, h, arrived, local, expert_flops(f_e, h));
    L.set_pass(Pass::BackwardWeight);
    L.gemm("moe.expert.down.wgrad", D.gemm_dtype, h, f_e, m_e, arrived, local, expert_flops(h, f_e));
    L.set_pass(Pass::BackwardInput);
    L.memory("moe.expert.act.bwd", busiest * f_e * kActBytes * (D.swiglu ? 5 : 3));
    L.gemm("moe.expert.up.dgrad", D.gemm_dtype, m_e, h, f_e * up, {}, local, expert_flops(h, f_e * up));
    L.set_pass(Pass::BackwardWeight);
    L.gemm("moe.expert.up.wgrad", D.gemm_dtype, h, f_e * up, m_e, arrived, local, expert_flops(h, f_e * up));
    L.set_pass(Pass::BackwardInput);
    const int rs = etp_comm ? L.comm("etp.rs.tokens.grad", CollectiveKind::ReduceScatter, CommClass::EP, etp * recv, {},
                                     false, true)
                            : -1;
    const int db = ep_comm ? L.comm("ep.dispatch.bwd", combine_kind, CommClass::EP, a2a, maybe(rs)) : -1;
    int shared_in = -1;
    if (shared_f > 0) {
      const int ag = D.sp ? L.comm("tp.ag.shared.grad", CollectiveKind::AllGather, CommClass::TP, act) : -1;
      L.gemm("moe.shared.down.dgrad", D.gemm_dtype, D.tokens, shared_f, h, maybe(ag));
      L.set_pass(Pass::BackwardWeight);
      L.gemm("moe.shared.down.wgrad", D.gemm_dtype, h, shared_f, D.tokens, maybe(ag));
      L.set_pass(Pass::BackwardInput);
      L.memory("moe.shared.act.bwd", D.tokens * shared_f * kActBytes * (D.swiglu ? 5 : 3));
      const int in = D.sp ? L.comm("tp.ag.shared.input", CollectiveKind::AllGather, CommClass::TP, act) : -1;
      L.gemm("moe.shared.up.dgrad", D.gemm_dtype, D.tokens, h, shared_f * up);
      shared_in = D.tp_comm ? L.comm("tp.shared.in.grad", tp_in_kind, CommClass::TP, act) : -1;
      L.set_pass(Pass::BackwardWeight);
      L.gemm("moe.shared.up.wgrad", D.gemm_dtype, h, shared_f * up, D.tokens, maybe(in));
      L.set_pass(Pass::BackwardInput);
    }
    L.memory("moe.permute.bwd", permute_bytes, maybe(db));
    L.gemm("moe.router.dgrad", D.attn_dtype, rt.tokens_in, h, E);
    L.set_pass(Pass::BackwardWeight);
    L.gemm("moe.router.wgrad", D.attn_dtype, h, E, rt.tokens_in);
    L.set_pass(Pass::BackwardInput);
    L.memory("norm2.bwd", act_norm * 4, maybe(shared_in));
  }
  append_slice(dense.backward, index_of(dense.backward, "attn.residual.bwd"), dense.backward.size(), &moe->backward);

  if (p.recompute == Recompute::Full) {
    moe->recompute = full_recompute_of(moe->forward, p, D);
  } else {
    moe->recompute = dense.recompute;  // selective: the attention core only
  }
  const MoeLayerParams params = moe_layer_params_per_rank(m, p);
  moe->grad_elements = params.dense;
  moe->expert_grad_elements = params.expert;
}

// A parallel attention + MLP block (GPT-J, GPT-NeoX's use_parallel_residual, PaLM,
// Chowdhery et al. 2022, Section 2): y = x + Attention(LN(x)) + MLP(LN(x)). One norm,
// the QKV and MLP input projections fused into one GEMM, and the two row-parallel
// output projections summed before one TP reduction per layer (forward and backward)
// instead of two.
void parallel_block_layer(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr, const Dims& D,
                          const KernelRecipe& R, LayerSteps* out) {
  const auto tp_kind = D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  const double act = D.tokens * D.h * kActBytes, act_norm = D.tokens_norm * D.h * kActBytes;
  const double kv_bytes = D.b * D.s_full * 2 * D.g_t * D.d * kActBytes;
  const double qkv = (D.a_t + 2 * D.g_t) * D.d, up = D.f_t * D.up_mult, in_n = qkv + up;
  const bool ov = p.tp_comm_overlap && D.tp_comm;
  auto gate = [&](int c) { return ov ? std::vector<int>{} : maybe(c); };
  auto after = [&](int c) { return ov ? maybe(c) : std::vector<int>{}; };
  // x + attention + MLP: one more input than the sequential block's residual add.
  const double residual = act_norm * (D.dropout ? 3.5 * R.residual_dropout : 3) + act_norm;
  const int residual_kernels = D.dropout ? R.residual_dropout_kernels : 1;
  const double cast_bytes = m.params_per_layer() / p.tp * (4 + kActBytes) * (R.casts_sharded ? 1.0 / p.dp : 1.0);
  const int cast_kernels = D.swiglu ? 5 : 4;
  {
    StepList L(&out->forward, Pass::Forward, tr.fp8_recipe);
    if (R.weight_casts) L.memory("amp.weight.cast", cast_bytes, {}, cast_kernels);
    L.memory("norm1", act_norm * 2 * R.norm, {}, R.norm_kernels);
    const int ag = D.sp ? L.comm("tp.ag.block", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("block.in", D.gemm_dtype, D.tokens, in_n, D.h, gate(ag));
    std::vector<int> core_waits = after(ag);
    if (m.rope) {
      L.memory("attn.rope", D.tokens * (D.a_t + D.g_t) * D.d * kActBytes * 2 * R.rope, core_waits, R.rope_kernels);
      core_waits.clear();
    }
    const int kv = D.cp_comm ? L.comm("cp.ag.kv", CollectiveKind::AllGather, CommClass::CP, kv_bytes) : -1;
    if (kv >= 0) core_waits.push_back(kv);
    attention_core_forward(L, D, tr.attention, core_waits);
    L.memory("mlp.act", D.tokens * D.f_t * kActBytes * (D.swiglu ? 3 * R.swiglu : 2), {},
             D.swiglu ? R.swiglu_kernels : 1);
    L.gemm("attn.proj", D.gemm_dtype, D.tokens, D.h, D.a_t * D.d_out);
    L.gemm("mlp.down", D.gemm_dtype, D.tokens, D.h, D.f_t);
    const int r = D.tp_comm ? L.comm("tp.block.out", tp_kind, CommClass::TP, act, {}, ov) : -1;
    L.memory("block.residual", residual, maybe(r), residual_kernels);
  }
  {
    StepList L(&out->backward, Pass::BackwardInput, tr.fp8_recipe);
    L.memory("block.residual.bwd", act_norm * 2);
    const int g = D.sp ? L.comm("tp.ag.block.grad", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("mlp.down.dgrad", D.gemm_dtype, D.tokens, D.f_t, D.h, gate(g));
    L.set_pass(Pass::BackwardWeight);
    L.gemm("mlp.down.wgrad", D.gemm_dtype, D.h, D.f_t, D.tokens, after(g));
    L.set_pass(Pass::BackwardInput);
    L.memory("mlp.act.bwd", D.tokens * D.f_t * kActBytes * (D.swiglu ? 5 * R.swiglu_bwd : 3), {},
             D.swiglu ? R.swiglu_bwd_kernels : 1);
    L.gemm("attn.proj.dgrad", D.gemm_dtype, D.tokens, D.a_t * D.d_out, D.h);
    L.set_pass(Pass::BackwardWeight);
    L.gemm("attn.proj.wgrad", D.gemm_dtype, D.h, D.a_t * D.d_out, D.tokens, after(g));
    L.set_pass(Pass::BackwardInput);
    attention_core_backward(L, D, tr.attention);
    const int rkv = D.cp_comm ? L.comm("cp.rs.kv.grad", CollectiveKind::ReduceScatter, CommClass::CP, kv_bytes) : -1;
    if (m.rope)
      L.memory("attn.rope.bwd", D.tokens * (D.a_t + D.g_t) * D.d * kActBytes * 2 * R.rope_bwd, {}, R.rope_kernels);
    const int in = D.sp ? L.comm("tp.ag.block.input", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("block.in.dgrad", D.gemm_dtype, D.tokens, D.h, in_n, maybe(rkv));
    const int rs = D.tp_comm ? L.comm("tp.block.in.grad", tp_kind, CommClass::TP, act) : -1;
    L.set_pass(Pass::BackwardWeight);
    L.gemm("block.in.wgrad", D.gemm_dtype, D.h, in_n, D.tokens, maybe(p.tp_grad_overlap || D.sp ? in : rs));
    L.set_pass(Pass::BackwardInput);
    L.memory("norm1.bwd", act_norm * 4 * R.norm_bwd, maybe(rs), R.norm_bwd_kernels);
    if (R.casts_sharded) L.memory("fsdp.weight.cast.bwd", cast_bytes, {}, cast_kernels);
  }
}

}  // namespace

ModelSteps build_model_steps(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  const Dims D = dims_of(m, p, tr);
  ModelSteps out;
  // The dense layer (attention + MLP); other layer kinds get their own steps here.
  LayerSteps& dense = out.by_kind[static_cast<std::size_t>(LayerKind::Dense)];
  const auto tp_out_kind = D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  const double act = D.tokens * D.h * kActBytes;                         // one hidden-state tensor, full tokens
  const double act_norm = D.tokens_norm * D.h * kActBytes;               // the same where SP shards it
  const double kv_bytes = D.b * D.s_full * 2 * D.g_t * D.d * kActBytes;  // gathered K and V
  // TP communication overlap (Megatron/TE userbuffers): a collective runs alongside the
  // GEMM next to it; the step after the GEMM waits for it instead of the GEMM.
  const bool ov = p.tp_comm_overlap && D.tp_comm;
  auto gate = [&](int c) { return ov ? std::vector<int>{} : maybe(c); };
  auto after = [&](int c) { return ov ? maybe(c) : std::vector<int>{}; };
  const KernelRecipe R = recipe_of(tr.framework);
  const double residual = act_norm * (D.dropout ? 3.5 * R.residual_dropout : 3);
  const int residual_kernels = D.dropout ? R.residual_dropout_kernels : 1;
  // fp32 -> 16-bit weight casts: read 4 + write 2 bytes per weight of this rank; one
  // launch per weight matrix (QKV, projection, MLP up (gate and up), down).
  const double cast_share = R.casts_sharded ? 1.0 / p.dp : 1.0;
  const double cast_bytes = m.params_per_layer() / p.tp * (4 + kActBytes) * cast_share;
  const int cast_kernels = D.swiglu ? 5 : 4;
  const double head_cast_bytes = static_cast<double>(m.vocab) * m.hidden / p.tp * (4 + kActBytes) * cast_share;

  if (m.parallel_block) parallel_block_layer(m, p, tr, D, R, &dense);
  // ---------------- forward of one layer ----------------
  if (!m.parallel_block) {
    StepList L(&dense.forward, Pass::Forward, tr.fp8_recipe);
    if (R.weight_casts) L.memory("amp.weight.cast", cast_bytes, {}, cast_kernels);
    L.memory("norm1", act_norm * 2 * R.norm, {}, R.norm_kernels);
    const int ag1 = D.sp ? L.comm("tp.ag.attn", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    if (m.mla.enabled()) {
      mla_projections_forward(L, m, D, gate(ag1));
    } else {
      L.gemm("attn.qkv", D.gemm_dtype, D.tokens, (D.a_t + 2 * D.g_t) * D.d, D.h, gate(ag1));
    }
    std::vector<int> core_waits = after(ag1);
    if (m.rope) {
      L.memory("attn.rope", D.tokens * (D.a_t + D.g_t) * D.d * kActBytes * 2 * R.rope, core_waits, R.rope_kernels);
      core_waits.clear();
    }
    const int kv = D.cp_comm ? L.comm("cp.ag.kv", CollectiveKind::AllGather, CommClass::CP, kv_bytes) : -1;
    if (kv >= 0) core_waits.push_back(kv);
    attention_core_forward(L, D, tr.attention, core_waits);
    L.gemm("attn.proj", D.gemm_dtype, D.tokens, D.h, D.a_t * D.d_out);
    const int r1 = D.tp_comm ? L.comm("tp.attn.out", tp_out_kind, CommClass::TP, act, {}, ov) : -1;
    L.memory("attn.residual", residual, maybe(r1), residual_kernels);  // bias-dropout-add (+ mask)
    L.memory("norm2", act_norm * 2 * R.norm, {}, R.norm_kernels);
    const int ag2 = D.sp ? L.comm("tp.ag.mlp", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("mlp.up", D.gemm_dtype, D.tokens, D.f_t * D.up_mult, D.h, gate(ag2));
    L.memory("mlp.act", D.tokens * D.f_t * kActBytes * (D.swiglu ? 3 * R.swiglu : 2), after(ag2),
             D.swiglu ? R.swiglu_kernels : 1);
    L.gemm("mlp.down", D.gemm_dtype, D.tokens, D.h, D.f_t);
    const int r2 = D.tp_comm ? L.comm("tp.mlp.out", tp_out_kind, CommClass::TP, act, {}, ov) : -1;
    L.memory("mlp.residual", residual, maybe(r2), residual_kernels);
  }

  // ---------------- backward of one layer ----------------
  if (!m.parallel_block) {
    StepList L(&dense.backward, Pass::BackwardInput, tr.fp8_recipe);
    const auto tp_in_kind = D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
    // MLP block, in reverse.
    L.memory("mlp.residual.bwd", act_norm * 2);
    const int g1 = D.sp ? L.comm("tp.ag.mlp.grad", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("mlp.down.dgrad", D.gemm_dtype, D.tokens, D.f_t, D.h, gate(g1));
    L.set_pass(Pass::BackwardWeight);
    L.gemm("mlp.down.wgrad", D.gemm_dtype, D.h, D.f_t, D.tokens, after(g1));
    L.set_pass(Pass::BackwardInput);
    L.memory("mlp.act.bwd", D.tokens * D.f_t * kActBytes * (D.swiglu ? 5 * R.swiglu_bwd : 3), {},
             D.swiglu ? R.swiglu_bwd_kernels : 1);
    const int in2 = D.sp ? L.comm("tp.ag.mlp.input", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("mlp.up.dgrad", D.gemm_dtype, D.tokens, D.h, D.f_t * D.up_mult);
    const int rs2 = D.tp_comm ? L.comm("tp.mlp.in.grad", tp_in_kind, CommClass::TP, act) : -1;
    // Without async TP all-reduce the weight-gradient GEMM waits for the input gradient's
    // all-reduce (same total as running it after the GEMM, as the 2021 code did).
    const int wg2 = p.tp_grad_overlap || D.sp ? in2 : rs2;
    L.set_pass(Pass::BackwardWeight);
    L.gemm("mlp.up.wgrad", D.gemm_dtype, D.h, D.f_t * D.up_mult, D.tokens, maybe(wg2));
    L.set_pass(Pass::BackwardInput);
    L.memory("norm2.bwd", act_norm * 4 * R.norm_bwd, maybe(rs2), R.norm_bwd_kernels);
    // Attention block, in reverse.
    L.memory("attn.residual.bwd", act_norm * 2);
    const int g2 = D.sp ? L.comm("tp.ag.attn.grad", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("attn.proj.dgrad", D.gemm_dtype, D.tokens, D.a_t * D.d_out, D.h, gate(g2));
    L.set_pass(Pass::BackwardWeight);
    L.gemm("attn.proj.wgrad", D.gemm_dtype, D.h, D.a_t * D.d_out, D.tokens, after(g2));
    L.set_pass(Pass::BackwardInput);
    attention_core_backward(L, D, tr.attention);
    const int rkv = D.cp_comm ? L.comm("cp.rs.kv.grad", CollectiveKind::ReduceScatter, CommClass::CP, kv_bytes) : -1;
    if (m.rope)
      L.memory("attn.rope.bwd", D.tokens * (D.a_t + D.g_t) * D.d * kActBytes * 2 * R.rope_bwd, {}, R.rope_kernels);
    const int in1 = D.sp ? L.comm("tp.ag.attn.input", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    if (m.mla.enabled()) {
      mla_projections_dgrad(L, m, D, maybe(rkv));
    } else {
      L.gemm("attn.qkv.dgrad", D.gemm_dtype, D.tokens, D.h, (D.a_t + 2 * D.g_t) * D.d, maybe(rkv));
    }
    const int rs1 = D.tp_comm ? L.comm("tp.attn.in.grad", tp_in_kind, CommClass::TP, act) : -1;
    const int wg1 = p.tp_grad_overlap || D.sp ? in1 : rs1;
    L.set_pass(Pass::BackwardWeight);
    if (m.mla.enabled()) {
      mla_projections_wgrad(L, m, D, maybe(wg1));
    } else {
      L.gemm("attn.qkv.wgrad", D.gemm_dtype, D.h, (D.a_t + 2 * D.g_t) * D.d, D.tokens, maybe(wg1));
    }
    L.set_pass(Pass::BackwardInput);
    L.memory("norm1.bwd", act_norm * 4 * R.norm_bwd, maybe(rs1), R.norm_bwd_kernels);
    if (R.casts_sharded) L.memory("fsdp.weight.cast.bwd", cast_bytes, {}, cast_kernels);  // re-gather for backward
  }

  // ---------------- recomputation before backward ----------------
  if (p.recompute == Recompute::Full) {
    dense.recompute = full_recompute_of(dense.forward, p, D);
  } else if (p.recompute == Recompute::Selective && tr.attention == AttentionKind::Unfused) {
    StepList L(&dense.recompute, Pass::Forward, tr.fp8_recipe);
    attention_core_forward(L, D, tr.attention, {});
  }

  // ---------------- embedding (first stage) ----------------
  {
    StepList L(&out.embedding_forward, Pass::Forward);
    L.memory("embed.lookup", act * (m.rope || m.alibi ? 2 : 3) / (D.sp ? D.t : 1.0));
    StepList B(&out.embedding_backward, Pass::BackwardWeight);
    B.memory("embed.grad", D.tokens * D.h * (kActBytes + 4 + 4));  // scatter-add into fp32 grads
  }
  // ---------------- final norm, LM head and loss (last stage) ----------------
  // The output layer sits outside the FP8 region of FP8 recipes (Megatron-core enters
  // Transformer Engine's fp8_autocast per transformer block), so it runs in 16-bit.
  {
    const double v_t = static_cast<double>(m.vocab) / p.tp;
    StepList L(&out.head_forward, Pass::Forward);
    if (R.weight_casts) L.memory("amp.head.cast", head_cast_bytes);
    L.memory("final.norm", act_norm * 2 * R.norm, {}, R.norm_kernels);
    const int ag = D.sp ? L.comm("tp.ag.head", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("head.logits", D.attn_dtype, D.tokens, v_t, D.h, maybe(ag));
    L.memory("loss.xent", D.tokens * v_t * (kActBytes + 4 + 4) * R.xent, {}, R.xent_kernels);
    StepList B(&out.head_backward, Pass::BackwardInput);
    B.memory("loss.xent.bwd", D.tokens * v_t * (4 + kActBytes) * R.xent_bwd, {}, R.xent_bwd_kernels);
    // With SP the head's input is sequence-sharded: its backward gathers it
    // again for the weight gradient, issued before the input-gradient GEMM and
    // overlapped with it, as for every column-parallel linear (Megatron-LM
    // LinearWithGradAccumulationAndAsyncCommunication.backward).
    const int in = D.sp ? B.comm("tp.ag.head.input", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    B.gemm("head.dgrad", D.attn_dtype, D.tokens, D.h, v_t);
    const int rs = D.tp_comm ? B.comm("tp.head.grad", D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce,
                                      CommClass::TP, act)
                             : -1;
    B.set_pass(Pass::BackwardWeight);
    B.gemm("head.wgrad", D.attn_dtype, D.h, v_t, D.tokens, maybe(p.tp_grad_overlap || D.sp ? in : rs));
    B.set_pass(Pass::BackwardInput);
    B.memory("final.norm.bwd", act_norm * 4 * R.norm_bwd, maybe(rs), R.norm_bwd_kernels);
  }

  dense.grad_elements = m.params_per_layer() / p.tp;
  if (m.moe.enabled()) build_moe_layer(m, p, tr, D, dense, &out.by_kind[static_cast<std::size_t>(LayerKind::Moe)]);
  out.embedding_grad_elements = m.embedding_params() / p.tp;
  out.head_grad_elements = static_cast<double>(m.vocab) * m.hidden / p.tp;
  // Every kernel of these steps is issued by the framework's host code (docs/frameworks.md,
  // "Host dispatch"), or replayed from a captured CUDA graph ("CUDA graphs").
  const double host = host_dispatch_seconds(tr.framework);
  auto issue = [host](std::vector<Step>& steps, bool captured) {
    for (Step& s : steps) {
      if (s.is_comm) continue;
      s.op.host_dispatch_seconds = host;
      s.op.graph_captured = captured;
    }
  };
  const bool layers_captured = tr.cuda_graphs != CudaGraphScope::None;
  const bool all_captured = tr.cuda_graphs == CudaGraphScope::Full;
  for (LayerSteps& k : out.by_kind) {
    issue(k.forward, layers_captured);
    issue(k.backward, layers_captured);
    issue(k.recompute, layers_captured);
  }
  issue(out.embedding_forward, all_captured);
  issue(out.embedding_backward, all_captured);
  issue(out.head_forward, all_captured);
  issue(out.head_backward, all_captured);
  return out;
}

std::vector<MuonMatrix> muon_matrices(const TransformerSpec& m, const ParallelSpec& p) {
  const double h = m.hidden, d = m.head_dim(), t = p.tp;
  const double up = m.mlp == MlpKind::SwiGlu ? 2 : 1;
  const double kv = std::max(1.0, static_cast<double>(m.kv_heads) / t) * d;
  const double q = static_cast<double>(m.heads) / t * d;
  return {{"optimizer.muon.qkv", q + 2 * kv, h},
          {"optimizer.muon.proj", h, q},
          {"optimizer.muon.mlp.up", m.ffn_hidden * up / t, h},
          {"optimizer.muon.mlp.down", h, m.ffn_hidden / t}};
}

ComputeOp muon_newton_schulz_op(const MuonMatrix& w, int layers) {
  const double small = std::min(w.rows, w.cols), large = std::max(w.rows, w.cols);
  ComputeOp op;
  op.name = w.name;
  op.kind = OpKind::Gemm;
  op.dtype = Dtype::BF16;
  // The shape of the two m x m x n GEMMs (the efficiency curves' size), all three counted.
  op.m = op.n = static_cast<std::int64_t>(small);
  op.k = static_cast<std::int64_t>(large);
  const double per_step = 4 * small * small * large + 2 * small * small * small;
  op.flops = per_step * kMuonNewtonSchulzSteps * layers;
  op.bytes = (2 * small * large + 2 * small * small) * kActBytes * 3 * kMuonNewtonSchulzSteps * layers;
  op.kernels = 3 * kMuonNewtonSchulzSteps * layers;
  return op;
}

double model_flops_per_iteration(const TransformerSpec& m, const TrainingSpec& tr, int global_batch) {
  const double h = m.hidden, d = m.head_dim(), s = tr.seq_len;
  const double tokens = static_cast<double>(global_batch) * s;
  const double linear = h * (m.heads * d) + 2 * h * (m.kv_heads * d) + (m.heads * d) * h +
                        (m.mlp == MlpKind::SwiGlu ? 3.0 : 2.0) * h * m.ffn_hidden;
  // GEMMs + attention scores/values (a sliding window bounds the keys per query)
  const double keys = m.sliding_window > 0 ? std::min(s, static_cast<double>(m.sliding_window)) : s;
  const double per_token_layer = 2 * linear + 4 * keys * m.heads * d;
  const double per_token_head = 2 * h * m.vocab;
  return 3 * tokens * (m.layers * per_token_layer + per_token_head);  // forward + 2x backward
}

}  // namespace trainsim
