#include "models/layer_steps.hpp"

#include <algorithm>
#include <utility>

namespace trainsim {

namespace {

constexpr double kActBytes = 2;  // activations are kept in 16-bit even when GEMMs run in FP8

// Appends steps to one list and keeps track of the last collective, so that the
// common case ("the next step needs the last collective's result") is one call.
class StepList {
 public:
  explicit StepList(std::vector<Step>* out, Pass pass) : out_(out), pass_(pass) {}
  void set_pass(Pass p) { pass_ = p; }

  int gemm(const std::string& name, Dtype dtype, double m, double n, double k, std::vector<int> waits = {},
           double count = 1) {
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
    const double flops = op.flops;
    const bool wgrad = name.size() > 6 && name.compare(name.size() - 6, 6, ".wgrad") == 0;
    if (dtype == Dtype::FP8 && !wgrad) {
      // Transformer Engine casts the 16-bit input (activation, or output gradient for
      // dgrad) to FP8 and keeps a transposed copy for the weight-gradient GEMM:
      // read 2 B, write 1 B + 1 B per element. Weights are cast once per step (cached).
      memory(name + ".fp8cast", m * k * count * (kActBytes + 2), std::move(waits));
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
           bool overlap_previous = false) {
    Step s;
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
};

std::vector<int> maybe(int idx) { return idx >= 0 ? std::vector<int>{idx} : std::vector<int>{}; }

struct Dims {
  double b, s_local, s_full, tokens, tokens_norm, h, d, a_t, g_t, f_t, up_mult, t;
  int cp;
  bool sp, tp_comm, cp_comm, swiglu;
  Dtype gemm_dtype;
  bool dropout;
  Dtype attn_dtype;  // attention, LM head and memory-bound work: FP8 recipes keep these in BF16
};

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
  d.up_mult = d.swiglu ? 2 : 1;
  d.tp_comm = p.tp > 1;
  d.cp_comm = p.cp > 1;
  d.gemm_dtype = tr.precision;
  d.dropout = tr.dropout;
  d.attn_dtype = tr.precision == Dtype::FP8 ? Dtype::BF16 : tr.precision;
  return d;
}

// Attention core forward (flash: one fused kernel; unfused: QK^T, softmax, dropout, AV).
void attention_core_forward(StepList& L, const Dims& D, AttentionKind kind, std::vector<int> waits) {
  const double model = 4 * D.b * D.s_local * D.s_full * D.a_t * D.d;  // QK^T and AV, full (non-causal) count
  if (kind != AttentionKind::Unfused) {
    const double bytes = (D.tokens * (2 * D.a_t * D.d) + D.b * D.s_full * 2 * D.g_t * D.d) * kActBytes;
    // causal: half the tiles run
    L.attention("attn.core", D.attn_dtype, model / 2, model, bytes, std::move(waits), false, kind);
    return;
  }
  const double heads = D.b * D.a_t;
  const double scores = heads * D.s_local * D.s_full;
  L.gemm("attn.qk", D.attn_dtype, D.s_local, D.s_full, D.d, std::move(waits), heads);
  L.memory("attn.softmax", scores * (2 + 2));
  if (D.dropout) L.memory("attn.dropout", scores * (2 + 2 + 1));
  L.gemm("attn.av", D.attn_dtype, D.s_local, D.d, D.s_full, {}, heads);
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

  // ---------------- forward of one layer ----------------
  {
    StepList L(&dense.forward, Pass::Forward);
    if (R.weight_casts) L.memory("amp.weight.cast", cast_bytes, {}, cast_kernels);
    L.memory("norm1", act_norm * 2 * R.norm, {}, R.norm_kernels);
    const int ag1 = D.sp ? L.comm("tp.ag.attn", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("attn.qkv", D.gemm_dtype, D.tokens, (D.a_t + 2 * D.g_t) * D.d, D.h, gate(ag1));
    std::vector<int> core_waits = after(ag1);
    if (m.rope) {
      L.memory("attn.rope", D.tokens * (D.a_t + D.g_t) * D.d * kActBytes * 2 * R.rope, core_waits, R.rope_kernels);
      core_waits.clear();
    }
    const int kv = D.cp_comm ? L.comm("cp.ag.kv", CollectiveKind::AllGather, CommClass::CP, kv_bytes) : -1;
    if (kv >= 0) core_waits.push_back(kv);
    attention_core_forward(L, D, tr.attention, core_waits);
    L.gemm("attn.proj", D.gemm_dtype, D.tokens, D.h, D.a_t * D.d);
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
  {
    StepList L(&dense.backward, Pass::BackwardInput);
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
    L.gemm("attn.proj.dgrad", D.gemm_dtype, D.tokens, D.a_t * D.d, D.h, gate(g2));
    L.set_pass(Pass::BackwardWeight);
    L.gemm("attn.proj.wgrad", D.gemm_dtype, D.h, D.a_t * D.d, D.tokens, after(g2));
    L.set_pass(Pass::BackwardInput);
    const double model_core = 4 * D.b * D.s_local * D.s_full * D.a_t * D.d;
    if (tr.attention != AttentionKind::Unfused) {
      // FlashAttention backward: recomputes QK^T and runs four GEMMs (2.5x the forward work).
      const double bytes = (D.tokens * (4 * D.a_t * D.d) + D.b * D.s_full * 4 * D.g_t * D.d) * kActBytes;
      L.attention("attn.core.bwd", D.attn_dtype, 2.5 * model_core / 2, 2 * model_core, bytes, {}, true, tr.attention);
    } else {
      const double heads = D.b * D.a_t;
      const double scores = heads * D.s_local * D.s_full;
      L.gemm("attn.av.dgrad", D.attn_dtype, D.s_local, D.s_full, D.d, {}, heads);
      L.gemm("attn.av.wgrad", D.attn_dtype, D.s_full, D.d, D.s_local, {}, heads);
      if (D.dropout) L.memory("attn.dropout.bwd", scores * (2 + 1 + 2));
      L.memory("attn.softmax.bwd", scores * (2 + 2 + 2));
      L.gemm("attn.qk.dgrad", D.attn_dtype, D.s_local, D.d, D.s_full, {}, heads);
      L.gemm("attn.qk.wgrad", D.attn_dtype, D.s_full, D.d, D.s_local, {}, heads);
    }
    const int rkv = D.cp_comm ? L.comm("cp.rs.kv.grad", CollectiveKind::ReduceScatter, CommClass::CP, kv_bytes) : -1;
    if (m.rope)
      L.memory("attn.rope.bwd", D.tokens * (D.a_t + D.g_t) * D.d * kActBytes * 2 * R.rope_bwd, {}, R.rope_kernels);
    const int in1 = D.sp ? L.comm("tp.ag.attn.input", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("attn.qkv.dgrad", D.gemm_dtype, D.tokens, D.h, (D.a_t + 2 * D.g_t) * D.d, maybe(rkv));
    const int rs1 = D.tp_comm ? L.comm("tp.attn.in.grad", tp_in_kind, CommClass::TP, act) : -1;
    const int wg1 = p.tp_grad_overlap || D.sp ? in1 : rs1;
    L.set_pass(Pass::BackwardWeight);
    L.gemm("attn.qkv.wgrad", D.gemm_dtype, D.h, (D.a_t + 2 * D.g_t) * D.d, D.tokens, maybe(wg1));
    L.set_pass(Pass::BackwardInput);
    L.memory("norm1.bwd", act_norm * 4 * R.norm_bwd, maybe(rs1), R.norm_bwd_kernels);
    if (R.casts_sharded) L.memory("fsdp.weight.cast.bwd", cast_bytes, {}, cast_kernels);  // re-gather for backward
  }

  // ---------------- recomputation before backward ----------------
  if (p.recompute == Recompute::Full) {
    dense.recompute = dense.forward;
  } else if (p.recompute == Recompute::Selective && tr.attention == AttentionKind::Unfused) {
    StepList L(&dense.recompute, Pass::Forward);
    attention_core_forward(L, D, tr.attention, {});
  }

  // ---------------- embedding (first stage) ----------------
  {
    StepList L(&out.embedding_forward, Pass::Forward);
    L.memory("embed.lookup", act * (m.rope ? 2 : 3) / (D.sp ? D.t : 1.0));
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
    B.gemm("head.dgrad", D.attn_dtype, D.tokens, D.h, v_t);
    const int rs = D.tp_comm ? B.comm("tp.head.grad", D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce,
                                      CommClass::TP, act)
                             : -1;
    B.set_pass(Pass::BackwardWeight);
    B.gemm("head.wgrad", D.attn_dtype, D.h, v_t, D.tokens, maybe(p.tp_grad_overlap || D.sp ? -1 : rs));
    B.set_pass(Pass::BackwardInput);
    B.memory("final.norm.bwd", act_norm * 4 * R.norm_bwd, maybe(rs), R.norm_bwd_kernels);
  }

  dense.grad_elements = m.params_per_layer() / p.tp;
  out.embedding_grad_elements = m.embedding_params() / p.tp;
  out.head_grad_elements = static_cast<double>(m.vocab) * m.hidden / p.tp;
  return out;
}

double model_flops_per_iteration(const TransformerSpec& m, const TrainingSpec& tr, int global_batch) {
  const double h = m.hidden, d = m.head_dim(), s = tr.seq_len;
  const double tokens = static_cast<double>(global_batch) * s;
  const double linear = h * (m.heads * d) + 2 * h * (m.kv_heads * d) + (m.heads * d) * h +
                        (m.mlp == MlpKind::SwiGlu ? 3.0 : 2.0) * h * m.ffn_hidden;
  const double per_token_layer = 2 * linear + 4 * s * m.heads * d;  // GEMMs + attention scores/values
  const double per_token_head = 2 * h * m.vocab;
  return 3 * tokens * (m.layers * per_token_layer + per_token_head);  // forward + 2x backward
}

}  // namespace trainsim
