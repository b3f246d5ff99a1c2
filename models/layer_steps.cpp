#include "models/layer_steps.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <utility>

#include "models/moe.hpp"
#include "sim/check.hpp"

namespace trainsim {

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
// Megatron-Core on Transformer Engine training in FP8: the runs whose FP8 casts and
// norms are Transformer Engine's kernels.
bool te_fp8(const TrainingSpec& tr) { return tr.framework == Framework::MegatronTe && tr.precision == Dtype::FP8; }
}  // namespace

Fp8WeightCast fp8_weight_cast(const TrainingSpec& tr) {
  if (!te_fp8(tr)) return {};
  // Transformer Engine 1.x (transformer_engine/pytorch/module/linear.py and
  // layernorm_linear.py: update_fp8_weights = is_first_microbatch is None or
  // is_first_microbatch): on the first micro-batch the module casts its weight into the
  // cached FP8 copy and its transpose (fp8_cast_transpose_fused: read 2 B, write 1 + 1 B
  // under delayed scaling, the recipe's quantisation as fp8_quantize_cost counts it); on
  // the others it reuses them. Megatron-Core's TE wrappers pass is_first_microbatch
  // (TELinear.forward, megatron/core/transformer/custom_layers/transformer_engine.py,
  // core_r0.8.0), set once per step by the schedule's forward_step
  // (model.set_is_first_microbatch(), megatron/core/pipeline_parallel/schedules.py).
  if (tr.fp8_params) {
    // FP8 primary weights (fp8_model_init, TE 1.11 module/base.py: Float8Tensor parameters
    // with_transpose_cache): the optimizer writes the FP8 data and invalidates the cached
    // transpose (NeMo's MegatronDistributedFusedAdam._param_copy_fragments: _reset_caches),
    // and the module's first forward of the step refills it (linear.py: transpose_2d(
    // fill_cache=True); tensor/float8_tensor.py: fp8_transpose_noalloc), read 1 B and write
    // 1 B per element, one kernel per weight; the later micro-batches reuse it. The tiled
    // transpose is charged at the cast-transpose's measured speed (the same family of
    // kernels in transformer_engine/common/transpose/, no figure of its own).
    return {2.0, 4, MemoryKernel::TeCastTranspose};
  }
  const Fp8Quantize q = fp8_quantize_cost(tr.fp8_recipe);
  return {q.bytes_per_element, 4 * q.kernels, fp8_cast_kernel(tr)};
}

MemoryKernel fp8_cast_kernel(const TrainingSpec& tr) {
  // Transformer Engine quantises a 16-bit tensor for an FP8 GEMM under DelayedScaling with one
  // cast-transpose kernel (fp8_cast_transpose_fused / cast_transpose, amax recorded in the
  // kernel; transformer_engine/common/transpose/cast_transpose.cu); Float8CurrentScaling runs
  // the same kernel after its amax pass, which is charged at the same rate (no figure of its
  // own). MXFP8 and block scaling run other quantisers, with no figure: the curve.
  const bool per_tensor = tr.fp8_recipe == Fp8Recipe::Delayed || tr.fp8_recipe == Fp8Recipe::Current;
  return te_fp8(tr) && per_tensor ? MemoryKernel::TeCastTranspose : MemoryKernel::Generic;
}

bool te_norm_fp8_output(const TrainingSpec& tr) {
  // Transformer Engine 1.x `_LayerNormLinear.forward` (transformer_engine/pytorch/module/
  // layernorm_linear.py, v1.8): under FP8 (and not return_layernorm_output, as Megatron-Core's
  // TELayerNormColumnParallelLinear builds it) the norm output is allocated as uint8 and the
  // norm kernel writes it in FP8 (_apply_normalization(..., fp8_out=True), the amax recorded
  // under delayed scaling); sequence parallelism all-gathers that FP8 tensor
  // (gather_along_first_dim(ln_out, ...)), the GEMM reads it with no cast, and the backward
  // re-gathers the saved FP8 shard and transposes it for the weight gradient
  // (tex.fp8_transpose: read 1 B, write 1 B). Delayed scaling only: current scaling needs the
  // norm output's amax before its scale exists.
  return te_fp8(tr) && tr.fp8_recipe == Fp8Recipe::Delayed;
}

bool te_fp8_gradient_gather(const TrainingSpec& tr) {
  // Transformer Engine 1.x `TransformerEngineBaseModule.grad_output_preprocess`
  // (transformer_engine/pytorch/module/base.py, v1.8), row-parallel under sequence parallelism
  // in FP8: "unfused bgrad, cast, transpose for efficient gather": cast_to_fp8 of the local
  // gradient, gather_along_first_dim of the FP8 tensor, tex.fp8_transpose of the gathered one;
  // with userbuffers the cast writes into the communicator's buffer, the dgrad GEMM's ring
  // exchange moves FP8 chunks and `_Linear.backward` transposes the gathered tensor before the
  // weight gradient (transformer_engine/pytorch/module/linear.py). Delayed scaling, as for the
  // norm's FP8 output: the scale exists before the cast.
  return te_norm_fp8_output(tr);
}

FsdpGradientPasses fsdp_gradient_passes(const TrainingSpec& tr, const ParallelSpec& p) {
  const bool fsdp1 = tr.framework == Framework::Eager || tr.framework == Framework::TorchCompile;
  if (!fsdp1 || p.zero < 3 || p.dp <= 1) return {};
  // PyTorch FSDP, torch/distributed/fsdp (github.com/pytorch/pytorch, releases 1.13-2.1):
  // - FlatParamHandle._use_unsharded_views runs under autograd and makes each parameter a
  //   torch.split view of the unsharded flat parameter, so the backward of split_with_sizes
  //   (split_with_sizes_backward, tools/autograd/derivatives.yaml) cats the parameters'
  //   gradients into the flat gradient: read + write in the parameter dtype.
  // - _post_backward_hook casts that gradient to the reduction dtype when it differs
  //   (flat_param.grad.to(handle._reduce_dtype)): read the parameter dtype, write the other.
  // - _reduce_grad divides the unsharded gradient in place by the pre-divide factor
  //   (_div_if_needed; _get_gradient_predivide_factor: > 1 for every world size >= 2),
  //   reduce-scatters it, then divides the 1/dp shard by the post-divide factor dp / pre,
  //   a division that _div_if_needed skips when that factor is 1 (dp = 2).
  const double param = activation_element_bytes(tr), reduce = tr.grad_reduce_bytes;
  int pre = 1;  // _get_gradient_predivide_factor: doubled while dp % pre == 0 and dp / pre > pre
  while (p.dp % pre == 0 && static_cast<double>(p.dp) / pre > pre) pre *= 2;
  const bool post_divide = static_cast<double>(p.dp) / pre > 1;
  FsdpGradientPasses g;
  g.bytes_per_element = 2 * param + 2 * reduce + (post_divide ? 2 * reduce / p.dp : 0.0);
  g.kernels = post_divide ? 3 : 2;
  if (reduce != param) {
    g.bytes_per_element += param + reduce;
    g.kernels += 1;
  }
  // Release 1.13 (training.fsdp_pad_copy): _post_backward_hook pads the flattened gradient
  // to a multiple of the world size with F.pad(grad.view(-1), [0, num_pad]) before the
  // reduce-scatter, unconditionally, and constant_pad_nd returns a clone when no pad is
  // positive: read + write of the gradient in the reduction dtype. From release 2.0
  // (_get_reduce_scatter_tensors) the copy happens only when padding is needed.
  if (tr.fsdp_pad_copy) {
    g.bytes_per_element += 2 * reduce;
    g.kernels += 1;
  }
  return g;
}

namespace {

// Transformer Engine's userbuffers pipeline overlap (a GEMM followed by a reduce-scatter)
// splits the GEMM into num_splits chunks: 4 by default (initialize_ub, transformer_engine/
// pytorch/module/base.py, v1.8) and in every NeMo-Framework-Launcher 24.07
// conf/training/tp_overlap/ub_cfg_h100_*.yaml that sets it.
constexpr int kUserbufferPipelineSplits = 4;

// Appends steps to one list and keeps track of the last collective, so that the
// common case ("the next step needs the last collective's result") is one call.
class StepList {
 public:
  // `act_bytes`: bytes of one activation element (activation_element_bytes).
  // `cast_kernel`: the implementation of the FP8 quantisation in front of FP8 GEMMs (fp8_cast_kernel).
  StepList(std::vector<Step>* out, Pass pass, double act_bytes, Fp8Recipe recipe = Fp8Recipe::Delayed,
           MemoryKernel cast_kernel = MemoryKernel::Generic)
      : out_(out), pass_(pass), act_bytes_(act_bytes), recipe_(recipe), cast_kernel_(cast_kernel) {}
  void set_pass(Pass p) { pass_ = p; }

  // `model_flops` < 0: the GEMM's own FLOPs (MoE experts count balanced routing instead).
  // `count` GEMMs of m x n x k in `kernels` launches (a batched GEMM is one launch; a GEMM
  // split into chunks is one launch per chunk).
  // `fp8_input`: the input arrives in FP8 already (Transformer Engine's LayerNormLinear,
  // te_norm_fp8_output), so no quantisation runs in front of the GEMM.
  int gemm(const std::string& name, Dtype dtype, double m, double n, double k, std::vector<int> waits = {},
           double count = 1, double model_flops = -1, int kernels = 1, bool fp8_input = false) {
    ComputeOp op;
    op.name = name;
    op.kind = OpKind::Gemm;
    op.kernels = kernels;
    op.dtype = dtype;
    op.m = static_cast<std::int64_t>(m);
    op.n = static_cast<std::int64_t>(n);
    op.k = static_cast<std::int64_t>(k);
    op.flops = 2 * m * n * k * count;
    const double in_elem = dtype == Dtype::FP8 ? 1.0 : act_bytes_;
    op.bytes = ((m * k + k * n) * in_elem + m * n * act_bytes_) * count;  // output in the activation precision
    const double flops = model_flops >= 0 ? model_flops : op.flops;
    auto ends_with = [&name](const char* suffix) {
      const std::string s(suffix);
      return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    const bool wgrad = ends_with(".wgrad");
    // FP8 training runs its backward GEMMs with the split accumulator (partial sums
    // promoted to FP32), its forward GEMMs with cuBLASLt's fast accumulation:
    // Transformer Engine's _2X_ACC_FPROP = False, _2X_ACC_DGRAD = _2X_ACC_WGRAD = True,
    // torchao's Float8LinearConfig likewise (docs/frameworks.md, "FP8 recipes").
    op.split_accumulator = dtype == Dtype::FP8 && (wgrad || ends_with(".dgrad"));
    if (dtype == Dtype::FP8 && !wgrad && !fp8_input) {
      // Transformer Engine quantises the 16-bit input (activation, or output gradient
      // for dgrad) to FP8 with the copy the weight-gradient GEMM reads, as the recipe
      // says (fp8_quantize_cost). Weights are cast once per step (cached).
      const Fp8Quantize q = fp8_quantize_cost(recipe_);
      memory(name + ".fp8cast", m * k * count * q.bytes_per_element, std::move(waits), q.kernels, cast_kernel_);
      waits = {};
    }
    return add_compute(std::move(op), flops, std::move(waits));
  }
  int memory(const std::string& name, double bytes, std::vector<int> waits = {}, int kernels = 1,
             MemoryKernel impl = MemoryKernel::Generic) {
    ComputeOp op;
    op.name = name;
    op.kind = OpKind::MemoryBound;
    op.memory_kernel = impl;
    op.dtype = Dtype::BF16;
    op.bytes = bytes;
    op.kernels = kernels;
    return add_compute(std::move(op), 0, std::move(waits));
  }
  // `dropout`: attention dropout runs inside the fused kernel (the profile's `dropout_speed`).
  int attention(const std::string& name, Dtype dtype, double exec_flops, double model_flops, double bytes,
                std::vector<int> waits, bool backward, AttentionKind kind, bool dropout) {
    ComputeOp op;
    op.name = name;
    op.kind = backward ? OpKind::AttentionBackward : OpKind::Attention;
    op.attention_kernel = kind == AttentionKind::FlashTriton       ? AttentionKernel::Triton
                          : kind == AttentionKind::FlashAttention3 ? AttentionKernel::FlashAttention3
                          : kind == AttentionKind::Cudnn           ? AttentionKernel::Cudnn
                                                                   : AttentionKernel::FlashAttention2;
    op.attention_dropout = dropout;
    op.dtype = dtype;
    op.flops = exec_flops;
    op.bytes = bytes;
    return add_compute(std::move(op), model_flops, std::move(waits));
  }
  int comm(const std::string& name, CollectiveKind kind, CommClass cls, double bytes, std::vector<int> waits = {},
           bool overlap_previous = false, bool expert_tp_group = false, int matrix = -1,
           Step::CpGroup cp_group = Step::CpGroup::All) {
    Step s;
    s.matrix = matrix;
    s.expert_tp_group = expert_tp_group;
    s.cp_group = cp_group;
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
  double act_bytes_;
  Fp8Recipe recipe_;
  MemoryKernel cast_kernel_;
};

std::vector<int> maybe(int idx) { return idx >= 0 ? std::vector<int>{idx} : std::vector<int>{}; }

struct Dims {
  double b, s_local, s_full, tokens, tokens_norm, h, d, a_t, g_t, f_t, up_mult, t;
  double d_out;  // per-head size of the attention output (MLA: the value head size; else d)
  // Attention: the share of the s_local x s_full score tiles a causal kernel runs,
  // and the keys per query the model-FLOP convention counts (the whole sequence).
  double causal, s_model;
  double kv_seq;  // tokens of K and V a ring CP gather moves (s_full, or cp x the largest uneven share)
  int cp;
  int ulysses, ring;  // Ulysses degree and ring size within cp (ParallelSpec::cp_ulysses)
  bool sp, tp_comm, swiglu;
  bool alibi;
  Dtype gemm_dtype;
  bool dropout;
  Dtype attn_dtype;  // attention, LM head and memory-bound work: FP8 recipes keep these in BF16
  double act_bytes;  // bytes of one activation element (activation_element_bytes)
  // Sliding-window attention: the query-key pairs a causal fused kernel computes, as a
  // share of full causal attention's, and the keys per query the model-FLOP count sees
  // (s_full without a window) as a share of s_full.
  double window_exec_share = 1, window_model_share = 1;
  // Uneven Ulysses shares (parallel.head_shares, or cp_shares under Ulysses) on one CP
  // rank's layout: each member of its Ulysses group's tokens (b x its sequence share)
  // and query and KV heads after the all-to-all; empty when the shares are even.
  std::vector<double> u_tokens, u_q, u_kv;
  int u_index = 0;  // this rank's place in its Ulysses group
};

// KV heads a Ulysses rank receives for the contiguous query heads [first, first + count)
// of its TP rank, `q` query heads sharing each KV head (GQA): every group the range
// touches, so a group split between two ranks is sent to both (as even Ulysses
// replicates KV heads fewer than its degree).
double kv_heads_of_range(double first, double count, double q) {
  if (count <= 0) return 0;
  return std::ceil((first + count) / q - 1e-9) - std::floor(first / q + 1e-9);
}

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
  // The norm kernels' implementation, for a measured speed of its own (MemoryKernel).
  MemoryKernel norm_impl = MemoryKernel::Generic, norm_bwd_impl = MemoryKernel::Generic;
  // Bytes per hidden column the norm's backward moves whatever the token count (apex's
  // persistent LayerNorm: its partial weight-gradient rows, written and read back).
  double norm_bwd_partial_bytes = 0;
  double rope = 1, rope_bwd = 1;
  int rope_kernels = 1;
  double swiglu = 1, swiglu_bwd = 1;  // SwiGLU activation (GeLU is one kernel everywhere)
  int swiglu_kernels = 1, swiglu_bwd_kernels = 1;
  double residual_dropout = 1;  // dropout + residual add (no dropout: one add everywhere)
  int residual_dropout_kernels = 1;
  double xent = 1, xent_bwd = 1;  // cross-entropy over the vocabulary
  int xent_kernels = 1, xent_bwd_kernels = 1;
  // Autograd's sum of the two gradients where the residual stream forks (the block
  // input feeds the norm and the residual add), and the residual dropout's backward.
  bool residual_fork_sum = false;
  // The backward of torch.split on the fused QKV output: a cat of dQ, dK and dV.
  bool qkv_split_grad = false;
  // Megatron-Core's fused RoPE in front of Transformer Engine's attention: V copied into the
  // batch-major layout, and with more than one sequence per micro-batch the attention output's
  // and its gradient's copies (`megatron-te` with RoPE; recipe_of).
  bool rope_bshd_copies = false;
  // Linear-layer biases (TransformerSpec::bias): the QKV bias added by its own kernel
  // after the GEMM, and every bias gradient as a column sum of its output gradient.
  bool bias_add = false, bias_grad = false;
  // Megatron-Core with Transformer Engine: only the MLP input projection's bias gradient
  // is a kernel of its own (autograd's sum over the tokens; below).
  bool bias_grad_up = false;
  bool weight_casts = false;   // fp32 master weights cast to 16 bits once per forward (AMP / FSDP2)
  bool casts_sharded = false;  // FSDP: the cast runs on the 1/dp shard, before the all-gather, in both passes
  bool casts_flat = false;     // FSDP1: one cast of the block's flat parameter instead of one per weight
};

// Launches of one layer's weight casts: one per weight matrix (QKV, projection, MLP up
// (gate and up), down), or one for FSDP1's flat parameter.
int weight_cast_kernels(const KernelRecipe& R, bool swiglu) {
  if (R.casts_flat) return 1;
  return swiglu ? 5 : 4;
}

// Megatron's unfused vocab-parallel cross-entropy on 16-bit or fp32 logits
// (megatron/core/tensor_parallel/cross_entropy.py, github.com/NVIDIA/Megatron-LM):
// the cast to fp32 (`.float()`, a copy for 16-bit logits), max, subtract, exp in
// place, sum, div_ in place: 32 B per fp32 logit in 5 kernels; backward: the
// target's indexed update and mul_ in place (8 B), then the cast's gradient back.
void megatron_unfused_cross_entropy(KernelRecipe& r, double act_bytes) {
  const bool cast = act_bytes < 4;
  r.xent = ((cast ? act_bytes + 4 : 0) + 32) / (act_bytes + 4 + 4);
  r.xent_kernels = cast ? 6 : 5;
  r.xent_bwd = (8 + (cast ? 4 + act_bytes : 0)) / (4 + act_bytes);
  r.xent_bwd_kernels = cast ? 3 : 2;
}

// Megatron-Core's fused cross-entropy (`cross_entropy_loss_fusion`,
// megatron/core/fusions/fused_cross_entropy.py, core_r0.8.0): the same steps in
// three functions compiled one by one (`jit_fuser` is torch.compile from PyTorch
// 2.2), each at least one pass over the logits: the cast and max (read 16 bits,
// write fp32), subtract, exp and sum (read and write fp32), the div_ (read and
// write fp32); backward one compiled function, read fp32 and write the 16-bit
// gradient. The minimum traffic of each function, since no kernel crosses them.
void megatron_compiled_cross_entropy(KernelRecipe& r, double act_bytes) {
  const bool cast = act_bytes < 4;
  r.xent = ((cast ? act_bytes + 4 : 4) + 8 + 8) / (act_bytes + 4 + 4);
  r.xent_kernels = 3;
  r.xent_bwd = 1;  // one pass: read the fp32 softmax, write the gradient in the logits' dtype
  r.xent_bwd_kernels = 1;
}

// Hidden sizes Megatron-LM's MixedFusedLayerNorm runs with apex.contrib's persistent
// kernel (`persist_ln_hidden_sizes`, megatron/model/fused_layer_norm.py, from October 2021),
// with the CTAs apex's 16-bit backward launcher splits one row over (CTAS_PER_ROW of its
// REGISTER_BWD_LAUNCHER lines, apex/contrib/csrc/layer_norm/ln_bwd_semi_cuda_kernel.cu);
// 0 for a size the list does not hold.
int persistent_layer_norm_ctas_per_row(int hidden) {
  static constexpr std::pair<int, int> kSizes[] = {
      {1024, 1},  {1536, 1},  {2048, 1},  {2304, 1},  {3072, 1},  {3840, 1},  {4096, 1},  {5120, 1},
      {6144, 1},  {8192, 2},  {10240, 2}, {12288, 4}, {12800, 5}, {15360, 4}, {16384, 4}, {18432, 4},
      {20480, 4}, {24576, 4}, {25600, 5}, {30720, 4}, {32768, 4}, {40960, 4}, {49152, 8}, {65536, 8}};
  for (const auto& [h, ctas] : kSizes) {
    if (h == hidden) return ctas;
  }
  return 0;
}

// The SMs ln_bwd_kernel's grid is sized for (below): an A100's 108, the GPU the code of
// 2021-2022 ran on (NVIDIA A100 Tensor Core GPU Architecture whitepaper). The step lists
// are built without the platform's GPU, which the simulator's GPU specs do not give SM
// counts for; docs/frameworks.md states the approximation.
constexpr int kPersistentLayerNormSms = 108;

KernelRecipe recipe_of(const TrainingSpec& tr, double act_bytes, const TransformerSpec& m) {
  const bool rmsnorm = m.rmsnorm;
  const Framework f = tr.framework;
  KernelRecipe r;
  // Biases (docs/frameworks.md, "Linear-layer biases"). Megatron-LM's GPT code (the
  // default lists; Megatron-DeepSpeed the same) adds the QKV bias after torch.matmul
  // (`output + bias` in linear_with_grad_accumulation_and_async_allreduce) and sums
  // every bias gradient over the tokens (`grad_output.sum(dim=0)`; autograd's
  // reduction for the biases fused into bias-GeLU and bias-dropout-add). Eager
  // nn.Linear adds its bias in the GEMM (addmm) but sums its gradient the same way.
  // Transformer Engine and Inductor fuse both into the GEMM or a neighbouring kernel.
  r.bias_add = f == Framework::Default || f == Framework::DeepSpeed || f == Framework::MegatronLegacy;
  r.bias_grad = r.bias_add || f == Framework::Eager || f == Framework::Fsdp2;
  // Megatron-Core builds the MLP input projection, the attention output projection and the
  // MLP output projection with skip_bias_add (Transformer Engine's return_bias: TE leaves
  // those biases to the next op) and the QKV projection without (TE adds it in its GEMM and
  // computes its gradient in the GEMM or FP8 cast-transpose kernel). The output projections'
  // biases go into the compiled bias-dropout-add (jit_fuser), whose generated backward sums
  // their gradients. The input projection's goes into the fused bias-GeLU / bias-SwiGLU, an
  // autograd.Function whose backward returns the full [tokens, ffn] gradient for the bias as
  // well (GeLUFunction.backward: `return tmp, tmp`, megatron/core/fusions/fused_bias_gelu.py,
  // core_r0.8.0), which the autograd engine reduces to the bias's shape (validate_outputs ->
  // sum_to, torch/csrc/autograd/engine.cpp): one reduction reading that gradient.
  r.bias_grad_up = f == Framework::MegatronTe;
  if (f == Framework::TorchCompile) r.weight_casts = true;  // Inductor fuses the pointwise chains, not the casts
  if (f == Framework::MegatronTe && m.rope && !m.mla.enabled()) {
    // Megatron-Core core_r0.8.0 with `apply_rope_fusion` (every RoPE recipe of NeMo 24.07 but
    // Nemotron-340B's): apply_rotary_pos_emb calls apex's fused_apply_rotary_pos_emb with
    // transpose_output_memory=True, whose outputs are batch-major ([b, s, h, d] memory), and
    // TEDotProductAttention.forward then switches to qkv_format 'bshd' and runs
    // `x.transpose(0, 1).contiguous()` on query, key and value: a no-op for the rotated query
    // and key, a copy of V, which is still a strided view of the QKV GEMM's output
    // (megatron/core/transformer/custom_layers/transformer_engine.py). It returns the output
    // transposed back to [s, b, h]: not contiguous when b > 1, so Transformer Engine's
    // prepare_forward copies it in front of the projection (`inp.contiguous()`,
    // transformer_engine/pytorch/module/base.py, v1.8), and FusedAttnFunc.backward copies the
    // transposed output gradient (`d_out = d_out.contiguous()`, attention.py). In the backward
    // dQ and dK come from the RoPE backward as tensors of their own, so Transformer Engine's
    // _SplitAlongDim.backward cannot return their common buffer and cats dQ, dK and dV.
    r.rope_bshd_copies = true;
    r.qkv_split_grad = true;
  }
  if (f == Framework::MegatronTe) {
    r.residual_fork_sum = true;
    if (tr.cross_entropy_loss_fusion) {
      megatron_compiled_cross_entropy(r, act_bytes);
    } else {
      megatron_unfused_cross_entropy(r, act_bytes);
    }
  }
  if (f == Framework::DeepSpeed || f == Framework::MegatronLegacy) {
    // Megatron-DeepSpeed's loss casts the logits to fp32 (`output.float()`) and runs
    // Megatron's unfused _VocabParallelCrossEntropy (github.com/microsoft/Megatron-DeepSpeed);
    // so does Megatron-LM's own GPT model without --fp16-lm-cross-entropy
    // (megatron/model/gpt_model.py, `vocab_parallel_cross_entropy(output.float(), labels)`,
    // github.com/NVIDIA/Megatron-LM, 2020-2022). The rest of this list is that model
    // code's too: Megatron-DeepSpeed forked it (docs/frameworks.md, "Megatron-LM's model
    // code before Megatron-Core").
    megatron_unfused_cross_entropy(r, act_bytes);
    // Megatron-DeepSpeed's MixedFusedLayerNorm / MixedFusedRMSNorm run apex's
    // fused_layer_norm_cuda (BLOOM's fork: the same kernels in megatron/fused_kernels/
    // layer_norm_cuda_kernel.cu); HostLayerNormGradient launches cuComputePartGradGammaBeta
    // (reads dY and X), cuComputeGradGammaBeta (the partial sums) and cuComputeGradInput
    // (reads dY and X, writes dX): 5 B per 1-byte element instead of the fused 4.
    r.norm_bwd = 5.0 / 4, r.norm_bwd_kernels = 3;
    r.norm_impl = MemoryKernel::ApexLayerNormForward, r.norm_bwd_impl = MemoryKernel::ApexLayerNormBackward;
    // Megatron-LM from October 2021 runs apex.contrib's persistent FastLayerNorm instead
    // for the hidden sizes it was built for (training.persist_layer_norm), in 2 kernels
    // (apex/contrib/csrc/layer_norm/ln_bwd_kernels.cuh, ln_bwd_semi_cuda_kernel.cu, ln_api.cpp):
    // ln_bwd_kernel reads dz and x and writes dx (3 element-sizes per element; the per-row
    // fp32 mean and rsigma are negligible), and each of its ctas_per_col CTA rows writes fp32
    // partial dgamma and dbeta rows [ctas_per_col, hidden] that ln_bwd_finalize_kernel reads
    // back: 16 B per partial row and hidden column. ln_api.cpp sizes ctas_per_col as
    // multiProcessorCount * (CTAs resident per SM) / CTAS_PER_ROW; the residency comes from
    // cudaOccupancyMaxActiveBlocksPerMultiprocessor on the compiled kernel, whose register use
    // is not known here: one CTA per SM, the fewest the persistent grid can have (a lower bound
    // on the partial-sum traffic), on kPersistentLayerNormSms SMs.
    const int ctas_per_row = persistent_layer_norm_ctas_per_row(m.hidden);
    if (f == Framework::MegatronLegacy && tr.persist_layer_norm && !rmsnorm && ctas_per_row > 0) {
      r.norm_bwd = 3.0 / 4, r.norm_bwd_kernels = 2;
      r.norm_bwd_partial_bytes = 16.0 * (kPersistentLayerNormSms / ctas_per_row);
      // The persistent kernels have no speed of their own: the curve (docs/calibration.md).
      r.norm_impl = MemoryKernel::Generic, r.norm_bwd_impl = MemoryKernel::Generic;
    }
    // ParallelAttention splits the fused QKV output with torch.split
    // (split_tensor_along_last_dim, megatron/core/tensor_parallel/utils.py), whose
    // derivative (split_backward, PyTorch tools/autograd/derivatives.yaml) cats the
    // three gradients into one: read + write of the QKV output.
    r.qkv_split_grad = true;
    r.residual_fork_sum = true;
  }
  if (f != Framework::Eager && f != Framework::Fsdp2) return r;
  // Eager PyTorch, op by op (Hugging Face LlamaRMSNorm, rotate_half RoPE, F.silu(gate) * up,
  // F.cross_entropy(logits.float())); bytes per element counted in docs/frameworks.md.
  if (rmsnorm) {
    r.norm = 9, r.norm_kernels = 8, r.norm_bwd = 9, r.norm_bwd_kernels = 12;
  } else {
    // nn.LayerNorm is one native kernel (aten layer_norm_kernel.cu); its backward
    // runs the input-gradient kernel, then GammaBetaBackward re-reading dY and X.
    r.norm_bwd = 12.0 / 8, r.norm_bwd_kernels = 2;
  }
  r.rope = 5, r.rope_bwd = 5, r.rope_kernels = 10;
  r.swiglu = 10.0 / 6, r.swiglu_kernels = 2, r.swiglu_bwd = 18.0 / 10, r.swiglu_bwd_kernels = 3;
  r.residual_dropout = 11.0 / 7, r.residual_dropout_kernels = 2;
  r.xent = 18.0 / 10, r.xent_kernels = 3, r.xent_bwd = 22.0 / 6, r.xent_bwd_kernels = 4;
  r.weight_casts = true;
  r.casts_sharded = f == Framework::Fsdp2;
  r.residual_fork_sum = true;
  if (tr.xentropy_loss) {
    // flash-attention's CrossEntropyLoss (flash_attn/losses/cross_entropy.py, v1.0.x) over
    // xentropy_cuda_lib (csrc/xentropy/xentropy_kernel.cu): cunn_SoftMaxXEntropyForward
    // reads each row of the 16-bit logits twice (max and sum, then the sum of exponentials)
    // and writes one fp32 loss and log-sum-exp per row; the backward kernel reads the
    // logits once and writes the 16-bit gradient. Around them, on [tokens] vectors only:
    // masked_fill_, the mean's sum, (target != ignore_index).sum() and the division;
    // backward: the division's gradient, grad_loss.contiguous() and masked_fill_.
    r.xent = 2 * act_bytes / (act_bytes + 4 + 4), r.xent_kernels = 6;
    r.xent_bwd = 2 * act_bytes / (4 + act_bytes), r.xent_bwd_kernels = 4;
  }
  return r;
}

Dims dims_of(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  Dims d{};
  d.t = p.tp;
  d.cp = p.cp;
  d.b = p.micro_batch;
  d.s_full = tr.seq_len;
  d.s_local = p.cp_local_tokens(tr.seq_len);
  // Uneven CP shares: the ring's K and V gather is padded to the largest share (an
  // all-gather moves equal blocks; a ring's every step waits for the largest in flight).
  d.kv_seq = p.cp_shares.empty()
                 ? d.s_full
                 : static_cast<double>(p.cp) * *std::max_element(p.cp_shares.begin(), p.cp_shares.end());
  d.causal = 0.5;
  d.s_model = d.s_full;
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
  d.ulysses = p.cp_ulysses;
  d.ring = p.cp_ring();
  d.gemm_dtype = tr.precision;
  d.dropout = tr.dropout;
  d.attn_dtype = tr.precision == Dtype::FP8 ? Dtype::BF16 : tr.precision;
  d.act_bytes = activation_element_bytes(tr);
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
  if (p.cp_rank >= 0 && p.cp_ulysses > 1 && (!p.head_shares.empty() || !p.cp_shares.empty())) {
    const int u = p.cp_ulysses, first = p.cp_rank / u * u;
    d.u_index = p.cp_rank % u;
    double start = 0;
    for (int x = 0; x < u; ++x) {
      const double heads = p.head_shares.empty() ? d.a_t / u : p.head_shares[static_cast<std::size_t>(x)];
      const double seq = p.cp_shares.empty() ? d.s_full / p.cp : p.cp_shares[static_cast<std::size_t>(first + x)];
      d.u_tokens.push_back(d.b * seq);
      d.u_q.push_back(heads);
      d.u_kv.push_back(kv_heads_of_range(start, heads, d.a_t / d.g_t));
      start += heads;
    }
  }
  return d;
}

// Model FLOPs of a GEMM every TP rank runs in full (MLA's down-projections):
// counted once over the TP group.
double replicated_flops(const Dims& D, double m, double n, double k) { return 2 * m * n * k / D.t; }

// The dimensions the attention core sees. Ulysses (Jacobs et al., DeepSpeed-Ulysses,
// arXiv:2309.14509) turns the rank's sequence shard of all heads into
// 1/ulysses of the heads over ulysses sequence shards; K and V heads fewer than the
// Ulysses degree are replicated (each rank keeps one). Ring CP then splits the
// queries of those heads over the ring (the whole sequence's K and V gathered).
// With uneven shares the rank attends with its own query and KV heads over its
// Ulysses group's tokens.
Dims attention_view(const Dims& d) {
  Dims a = d;
  if (!d.u_q.empty()) {
    a.a_t = d.u_q[static_cast<std::size_t>(d.u_index)];
    a.g_t = d.u_kv[static_cast<std::size_t>(d.u_index)];
    a.s_local = std::accumulate(d.u_tokens.begin(), d.u_tokens.end(), 0.0) / d.b;
  } else {
    a.a_t = d.a_t / d.ulysses;
    a.g_t = std::max(1.0, d.g_t / d.ulysses);
    a.s_local = d.s_local * d.ulysses;  // the queries of ulysses sequence shards
  }
  a.tokens = d.b * a.s_local;
  return a;
}

// The per-pair bytes of uneven Ulysses all-to-alls (Dims::u_q non-empty), appended to
// `traffic`: Ulysses rank i sends rank j the Q, K and V of j's heads for i's tokens
// (qkv), and j sends i back the output of its heads for them (out); the backward moves
// the gradients of the same tensors the other way (the transposes).
struct UlyssesMatrices {
  int qkv = -1, out = -1, out_grad = -1, qkv_grad = -1;
  double qkv_bytes = 0, out_bytes = 0;  // the largest buffer a member sends or receives
};
UlyssesMatrices ulysses_matrices(const Dims& D, std::vector<std::vector<double>>* traffic) {
  UlyssesMatrices m;
  const std::size_t n = D.u_q.size();
  std::vector<double> qkv(n * n), out(n * n), qkv_t(n * n), out_t(n * n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      qkv[i * n + j] = D.u_tokens[i] * (D.u_q[j] + 2 * D.u_kv[j]) * D.d * D.act_bytes;
      out[j * n + i] = D.u_tokens[i] * D.u_q[j] * D.d_out * D.act_bytes;
      qkv_t[j * n + i] = qkv[i * n + j];
      out_t[i * n + j] = out[j * n + i];
    }
  }
  auto largest_buffer = [n](const std::vector<double>& b) {
    double most = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double sent = 0, received = 0;
      for (std::size_t j = 0; j < n; ++j) {
        sent += b[i * n + j];
        received += b[j * n + i];
      }
      most = std::max({most, sent, received});
    }
    return most;
  };
  m.qkv_bytes = largest_buffer(qkv);
  m.out_bytes = largest_buffer(out);
  auto add = [traffic](std::vector<double>& bytes) {
    traffic->push_back(std::move(bytes));
    return static_cast<int>(traffic->size() - 1);
  };
  m.qkv = add(qkv);
  m.out = add(out);
  m.out_grad = add(out_t);
  m.qkv_grad = add(qkv_t);
  return m;
}

// MLA projections of one layer (DeepSeek-V2, arXiv:2405.04434, Section 2.1) in
// place of the QKV GEMM: the down-projections (replicated over TP, as
// Megatron-Core's MLA keeps them) with RMSNorms on the latents, the
// up-projections split by heads over TP.
void mla_projections_forward(StepList& L, const TransformerSpec& m, const Dims& D, std::vector<int> waits) {
  auto replicated = [&D](double rows, double cols, double inner) { return replicated_flops(D, rows, cols, inner); };
  const MlaSpec& a = m.mla;
  const double qk = a.qk_nope_dim + a.qk_rope_dim;
  if (a.q_lora_rank > 0) {
    L.gemm("attn.q.down", D.gemm_dtype, D.tokens, a.q_lora_rank, D.h, std::move(waits), 1,
           replicated(D.tokens, a.q_lora_rank, D.h));
    waits = {};
    L.memory("attn.q.norm", D.tokens * a.q_lora_rank * D.act_bytes * 2);
    L.gemm("attn.q.up", D.gemm_dtype, D.tokens, D.a_t * qk, a.q_lora_rank);
  } else {
    L.gemm("attn.q", D.gemm_dtype, D.tokens, D.a_t * qk, D.h, std::move(waits));
    waits = {};
  }
  L.gemm("attn.kv.down", D.gemm_dtype, D.tokens, a.kv_lora_rank + a.qk_rope_dim, D.h, {}, 1,
         replicated(D.tokens, a.kv_lora_rank + a.qk_rope_dim, D.h));
  L.memory("attn.kv.norm", D.tokens * a.kv_lora_rank * D.act_bytes * 2);
  L.gemm("attn.kv.up", D.gemm_dtype, D.tokens, D.a_t * (a.qk_nope_dim + a.v_head_dim), a.kv_lora_rank);
}

// Input gradients of the MLA projections (B); `waits` gate the first one.
void mla_projections_dgrad(StepList& L, const TransformerSpec& m, const Dims& D, std::vector<int> waits) {
  auto replicated = [&D](double rows, double cols, double inner) { return replicated_flops(D, rows, cols, inner); };
  const MlaSpec& a = m.mla;
  const double qk = a.qk_nope_dim + a.qk_rope_dim;
  L.gemm("attn.kv.up.dgrad", D.gemm_dtype, D.tokens, a.kv_lora_rank, D.a_t * (a.qk_nope_dim + a.v_head_dim),
         std::move(waits));
  L.memory("attn.kv.norm.bwd", D.tokens * a.kv_lora_rank * D.act_bytes * 3);
  L.gemm("attn.kv.down.dgrad", D.gemm_dtype, D.tokens, D.h, a.kv_lora_rank + a.qk_rope_dim, {}, 1,
         replicated(D.tokens, D.h, a.kv_lora_rank + a.qk_rope_dim));
  if (a.q_lora_rank > 0) {
    L.gemm("attn.q.up.dgrad", D.gemm_dtype, D.tokens, a.q_lora_rank, D.a_t * qk);
    L.memory("attn.q.norm.bwd", D.tokens * a.q_lora_rank * D.act_bytes * 3);
    L.gemm("attn.q.down.dgrad", D.gemm_dtype, D.tokens, D.h, a.q_lora_rank, {}, 1,
           replicated(D.tokens, D.h, a.q_lora_rank));
  } else {
    L.gemm("attn.q.dgrad", D.gemm_dtype, D.tokens, D.h, D.a_t * qk);
  }
}

// Weight gradients of the MLA projections (W); `waits` gate the first one.
void mla_projections_wgrad(StepList& L, const TransformerSpec& m, const Dims& D, std::vector<int> waits) {
  auto replicated = [&D](double rows, double cols, double inner) { return replicated_flops(D, rows, cols, inner); };
  const MlaSpec& a = m.mla;
  const double qk = a.qk_nope_dim + a.qk_rope_dim;
  L.gemm("attn.kv.up.wgrad", D.gemm_dtype, a.kv_lora_rank, D.a_t * (a.qk_nope_dim + a.v_head_dim), D.tokens,
         std::move(waits));
  L.gemm("attn.kv.down.wgrad", D.gemm_dtype, D.h, a.kv_lora_rank + a.qk_rope_dim, D.tokens, {}, 1,
         replicated(D.h, a.kv_lora_rank + a.qk_rope_dim, D.tokens));
  if (a.q_lora_rank > 0) {
    L.gemm("attn.q.up.wgrad", D.gemm_dtype, a.q_lora_rank, D.a_t * qk, D.tokens);
    L.gemm("attn.q.down.wgrad", D.gemm_dtype, D.h, a.q_lora_rank, D.tokens, {}, 1,
           replicated(D.h, a.q_lora_rank, D.tokens));
  } else {
    L.gemm("attn.q.wgrad", D.gemm_dtype, D.h, D.a_t * qk, D.tokens);
  }
}

// Attention core forward (flash: one fused kernel; unfused: QK^T, softmax, dropout, AV).
void attention_core_forward(StepList& L, const Dims& D, AttentionKind kind, std::vector<int> waits) {
  const double model = 4 * D.b * D.s_local * D.s_model * D.a_t * D.d;           // QK^T and AV, full (non-causal) count
  const double exec = 4 * D.b * D.s_local * D.s_full * D.a_t * D.d * D.causal;  // the tiles a causal kernel runs
  // ALiBi in a fused kernel (FlashAttention-2 from 2.4 takes the per-head
  // slopes and adds the bias in registers): no memory traffic of its own.
  if (kind != AttentionKind::Unfused) {
    const double bytes = (D.tokens * (2 * D.a_t * D.d) + D.b * D.s_full * 2 * D.g_t * D.d) * D.act_bytes;
    // causal: the tiles a causal kernel runs; a sliding window skips the tiles outside it
    // (FlashAttention-2's window_size, from version 2.3).
    L.attention("attn.core", D.attn_dtype, exec * D.window_exec_share, model * D.window_model_share, bytes,
                std::move(waits), false, kind, D.dropout);
    return;
  }
  // Unfused attention computes every score and masks those outside the window.
  const double heads = D.b * D.a_t;
  const double scores = heads * D.s_local * D.s_full;
  if (D.alibi) {
    // Unfused ALiBi (BLOOM's Megatron-DeepSpeed): the [b*heads, 1, s] bias is
    // broadcast into the score buffer (write 2 B per score) that torch.baddbmm
    // then reads with beta = 1 (2 B per score) instead of beta = 0.
    L.memory("attn.alibi", scores * (D.act_bytes + D.act_bytes), waits);
    waits.clear();
  }
  L.gemm("attn.qk", D.attn_dtype, D.s_local, D.s_full, D.d, std::move(waits), heads);
  const double e = D.act_bytes;
  if (e < 4) {
    L.memory("attn.softmax", scores * (e + e));  // Megatron's fused scale-mask-softmax kernel
  } else {
    // Megatron's FusedScaleMaskSoftmax runs its fused kernel only for 16-bit inputs;
    // FP32 scores take forward_torch_softmax: masked_fill_ and torch softmax, each
    // reading and writing every score (query-key layer scaling, when a model turns
    // it on, adds a third pass that is not counted).
    L.memory("attn.softmax", scores * 2 * (e + e), {}, 2);
  }
  if (D.dropout) L.memory("attn.dropout", scores * (e + e + 1));
  L.gemm("attn.av", D.attn_dtype, D.s_local, D.d, D.s_full, {}, heads);
  // The batched AV product leaves the context head-major ([b * heads, s, d]); the
  // projection reads it token-major, so the framework copies it (Megatron-LM's
  // CoreAttention: `context_layer.permute(2, 0, 1, 3).contiguous()`; Hugging Face's
  // eager attention: `attn_output.transpose(1, 2).contiguous()`): read + write.
  L.memory("attn.context.copy", D.tokens * D.a_t * D.d_out * (e + e));
}

// Attention core backward (flash: one fused kernel; unfused: the four GEMMs with
// the softmax and dropout gradients between them).
// Attention core backward on the attention view A (flash: one fused kernel; unfused:
// the four GEMMs and the softmax backward); `waits`: what its first step needs.
void attention_core_backward(StepList& L, const Dims& A, AttentionKind kind, std::vector<int> waits) {
  const double model_core = 4 * A.b * A.s_local * A.s_model * A.a_t * A.d;
  const double exec_core = 4 * A.b * A.s_local * A.s_full * A.a_t * A.d * A.causal;
  if (kind != AttentionKind::Unfused) {
    // FlashAttention backward: recomputes QK^T and runs four GEMMs (2.5x the forward work).
    const double bytes = (A.tokens * (4 * A.a_t * A.d) + A.b * A.s_full * 4 * A.g_t * A.d) * A.act_bytes;
    L.attention("attn.core.bwd", A.attn_dtype, 2.5 * exec_core * A.window_exec_share,
                2 * model_core * A.window_model_share, bytes, std::move(waits), true, kind, A.dropout);
    return;
  }
  const double heads = A.b * A.a_t;
  const double scores = heads * A.s_local * A.s_full;
  L.gemm("attn.av.dgrad", A.attn_dtype, A.s_local, A.s_full, A.d, std::move(waits), heads);
  L.gemm("attn.av.wgrad", A.attn_dtype, A.s_full, A.d, A.s_local, {}, heads);
  const double e = A.act_bytes;
  if (A.dropout) L.memory("attn.dropout.bwd", scores * (e + 1 + e));
  if (e < 4) {
    L.memory("attn.softmax.bwd", scores * (e + e + e));
  } else {
    // torch softmax backward (read output and gradient, write), then the
    // gradient of masked_fill_. Megatron's mask function fills in place a view
    // of the score GEMM's output (`matmul_result.view(...)`) and the softmax
    // reads that view, so autograd regenerates the view's grad_fn as
    // AsStridedBackward0 (torch/csrc/autograd/variable.cpp: a `.view()` of a
    // dense tensor records no view function) and runs the fill's gradient through
    // CopySlices (torch/csrc/autograd/functions/tensor.cpp). as_strided_backward
    // (torch/csrc/autograd/FunctionsManual.cpp) zero-fills a base-sized buffer
    // and copies the gradient into it: 2 kernels, 12 B per score. CopySlices
    // copies that into a fresh base-shaped buffer, clones the view's slice, runs
    // masked_fill out of place and copies the result back: 4 kernels of 8 B.
    L.memory("attn.softmax.bwd", scores * (3 * e + 3 * e + 4 * (e + e)), {}, 7);
  }
  L.gemm("attn.qk.dgrad", A.attn_dtype, A.s_local, A.d, A.s_full, {}, heads);
  L.gemm("attn.qk.wgrad", A.attn_dtype, A.s_full, A.d, A.s_local, {}, heads);
}

// Ring context parallelism as Transformer Engine runs it (AttnFuncWithCPAndKVP2P,
// transformer_engine/pytorch/attention.py, v2.2; Megatron-Core's default cp_comm_type
// "p2p"), for even sequence shares of a causal sequence without a window: one fused attention
// kernel per ring step instead of one over the gathered K and V. With load balancing
// each rank holds two half-chunks of the sequence; step 0 is causal over its own K and
// V, every other step non-causal over half of the queries (the K/V block of a later
// rank) or half of the K/V block (an earlier rank): each step runs the same FLOPs,
// 1/ring of a causal kernel over the whole sequence.
bool ring_steps_apply(const Dims& A, AttentionKind kind) {
  return A.ring > 1 && kind != AttentionKind::Unfused && A.causal == 0.5 && A.kv_seq == A.s_full &&
         A.s_local * A.ring == A.s_full && A.window_exec_share == 1 && A.window_model_share == 1;
}

// The ring's K/V exchange of one step (the next block sent to the next rank while the
// current step runs) as an all-gather of the ring whose per-GPU traffic is `blocks` K/V
// blocks (b x s/ring x 2 x g x d): ring-1 such all-gathers move what one all-gather of the
// whole sequence moves, over the same neighbour links, each paying its own hop latencies.
int ring_exchange(StepList& L, const char* name, const Dims& A, double blocks, std::vector<int> waits,
                  bool overlap_previous, Step::CpGroup group) {
  const double kv_all = A.b * A.kv_seq * 2 * A.g_t * A.d * A.act_bytes;
  const double bytes = blocks * kv_all / (A.ring - 1);
  return L.comm(name, CollectiveKind::AllGather, CommClass::CP, bytes, std::move(waits), overlap_previous, false, -1,
                group);
}

// One ring step's sizes on a rank: its K/V block (two half-chunks of s/ring tokens), its
// queries' bytes, and the FLOPs a step runs and counts (1/ring of the whole causal kernel).
struct RingStep {
  double s_kv, block, q_bytes, exec, model;
  explicit RingStep(const Dims& A)
      : s_kv(A.s_local),
        block(A.b * s_kv * 2 * A.g_t * A.d * A.act_bytes),
        q_bytes(A.tokens * A.a_t * A.d * A.act_bytes),
        exec(4 * A.b * A.s_local * s_kv * A.a_t * A.d * 0.5),
        model(4 * A.b * A.s_local * A.s_model * A.a_t * A.d / A.ring) {}
};

// Forward of the ring (ring_steps_apply), on the last rank of the ring (every
// non-causal step over all its queries and half a K/V block: the most correction
// traffic). `waits`: what the first step needs.
void ring_attention_forward(StepList& L, const Dims& A, AttentionKind kind, std::vector<int> waits,
                            Step::CpGroup group) {
  const int n = A.ring;
  const double e = A.act_bytes;
  const RingStep st(A);
  const double out_bytes = A.tokens * A.a_t * A.d_out * e;
  // p2p_comm_buffers[0] = torch.cat of K and V: read and write the rank's block.
  L.memory("attn.cp.kv.cat", 2 * st.block, std::move(waits));
  int prev = -1;
  for (int i = 0; i < n; ++i) {
    // Step i posts the send/recv of block i+1 on its stream once block i has arrived;
    // steps alternate on two streams, so the transfer waits for step i-2, not i-1.
    const int next =
        i < n - 1 ? ring_exchange(L, "cp.p2p.kv", A, 1, maybe(prev), /*overlap_previous=*/i > 0, group) : -1;
    const double kv_tokens = i == 0 ? st.s_kv : st.s_kv / 2;  // the last rank: half of each earlier block
    const double bytes = (st.q_bytes + out_bytes + A.b * kv_tokens * 2 * A.g_t * A.d * e);
    L.attention("attn.core", A.attn_dtype, st.exec, st.model, bytes, maybe(prev), false, kind, A.dropout);
    prev = next;
  }
  // flash_attn_fwd_softmax_lse_correction per step after the first (the running LSE in
  // fp64, the step's in fp32: read 8 + 4, write 8 B per query and head), then the output
  // corrections after the loop: the first step's output scaled into `out` (read + write),
  // every later one scaled and added (read the step's output, read + write `out`).
  const double lse = A.tokens * A.a_t;
  L.memory("attn.cp.lse.correction", (n - 1) * lse * 20, {}, n - 1);
  L.memory("attn.cp.out.correction", 2 * out_bytes + (n - 1) * 3 * out_bytes + n * lse * 8, {}, n);
}

// Backward of the ring on the same rank: one stream; step i sends the K/V block it
// works on with the dK/dV accumulated for it (the first only K/V, the last only dK/dV)
// while its kernel runs, adds its dQ into dq, then waits for the block's dK/dV from the
// next rank and adds its own into it (all in the activation dtype).
void ring_attention_backward(StepList& L, const Dims& A, AttentionKind kind, std::vector<int> waits,
                             Step::CpGroup group) {
  const int n = A.ring;
  const RingStep st(A);
  // p2p_comm_buffers[0][0].copy_(kv): the saved local K/V into the send buffer.
  L.memory("attn.cp.kv.copy", 2 * st.block, std::move(waits));
  int prev = -1;
  for (int i = 0; i < n; ++i) {
    const bool first = i == 0, last = i == n - 1;
    const int xfer =
        ring_exchange(L, last ? "cp.p2p.dkv" : "cp.p2p.kv", A, first || last ? 1 : 2, maybe(prev), false, group);
    // The reverse of the forward: the last step is the causal one over the rank's own
    // block; the others run all queries over half of a K/V block.
    const double kv_tokens = last ? st.s_kv : st.s_kv / 2;
    const double bytes = 2 * st.q_bytes * 2 + A.b * kv_tokens * 4 * A.g_t * A.d * A.act_bytes;
    L.attention("attn.core.bwd", A.attn_dtype, 2.5 * st.exec, 2 * st.model, bytes, maybe(prev), true, kind, A.dropout);
    L.memory("attn.cp.dq.acc", (first ? 2 : 3) * st.q_bytes);  // dq.copy_ / dq.add_
    const double dkv = last ? st.block : st.block / 2;         // dkv[:, 0].copy_ / add_, the last dkv.add_
    L.memory("attn.cp.dkv.acc", (first ? 2 : 3) * dkv, {xfer});
    prev = xfer;
  }
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
  StepList L(&out, Pass::Forward, D.act_bytes);
  const int ag = L.comm("tp.ag.checkpoint", CollectiveKind::AllGather, CommClass::TP, D.tokens * D.h * D.act_bytes);
  append_slice(forward, 0, forward.size(), &out);
  for (std::size_t j = 1; j < out.size(); ++j) {
    if (!out[j].is_comm) {
      out[j].waits.push_back(ag);
      break;
    }
  }
  return out;
}

// `steps` less its first step where that is called `name` (nothing waits on it).
std::vector<Step> without_first(const std::vector<Step>& steps, const std::string& name) {
  if (steps.empty() || steps.front().name != name) return steps;
  std::vector<Step> out;
  append_slice(steps, 1, steps.size(), &out);
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
// token dispatch (all-to-all-v over the EP group with the draw's per-pair
// bytes, all-gather over the expert TP group), the local experts as one
// grouped GEMM per projection sized by the draw's busiest rank, combine,
// unpermutation and shared experts (Megatron-Core MoELayer with the alltoall
// token dispatcher; shared experts after the routed ones, its default without
// shared-expert overlap). Backward mirrors it. The dispatch and combine
// matrices are appended to `traffic`.
void residual_backward(StepList& L, const char* name, const Dims& D, const KernelRecipe& R, double act_norm);

void build_moe_layer(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr, const Dims& D,
                     const LayerSteps& dense, const RoutingDraw& draw, const std::vector<int>& ep_node,
                     std::vector<std::vector<double>>* traffic, LayerSteps* moe) {
  const RoutedTokens rt = routed_tokens(m, p, tr, {draw});
  const double h = D.h, E = m.moe.experts;
  const int etp = expert_tp(p);
  const double local = E / p.ep;
  const double f_e = static_cast<double>(m.moe.expert_ffn) / etp;
  const double busiest = rt.max_rank_tokens * etp;                       // tokens the busiest rank's experts compute
  const double balanced = rt.balanced_rank_tokens * etp;                 // the same without skew or drops (model FLOPs)
  const double m_e = busiest / local;                                    // rows of one expert's GEMM
  const double recv = rt.max_rank_tokens * h * D.act_bytes;              // tokens the busiest rank receives
  const double permuted = rt.tokens_in * m.moe.top_k * h * D.act_bytes;  // permuted copies of the input tokens
  // alltoall / deepep: an all-to-all-v with the draw's per-pair bytes (combine:
  // the transpose); its buffer is the most any rank sends or receives.
  // allgather: every EP rank's tokens gathered on every rank (the output
  // buffer), the local experts' copies picked from them, and the outputs
  // reduce-scattered back; its traffic does not depend on routing.
  const bool allgather = p.moe_dispatcher == MoeDispatcher::AllGather;
  const double gathered = p.ep * rt.tokens_in * h * D.act_bytes;
  double a2a = gathered;
  int dispatch_matrix = -1, combine_matrix = -1;
  if (!allgather) {
    const std::vector<double> bytes = dispatch_bytes(m, p, draw, rt.tokens_in, ep_node, h * D.act_bytes);
    const int n = p.ep;
    std::vector<double> transpose(bytes.size());
    a2a = 0;
    for (int i = 0; i < n; ++i) {
      double out = 0, in = 0;
      for (int j = 0; j < n; ++j) {
        transpose[static_cast<std::size_t>(j) * n + i] = bytes[static_cast<std::size_t>(i) * n + j];
        if (j == i) continue;  // a rank's copies for its own experts stay
        out += bytes[static_cast<std::size_t>(i) * n + j];
        in += bytes[static_cast<std::size_t>(j) * n + i];
      }
      a2a = std::max({a2a, out, in});
    }
    dispatch_matrix = static_cast<int>(traffic->size());
    traffic->push_back(bytes);
    combine_matrix = static_cast<int>(traffic->size());
    traffic->push_back(std::move(transpose));
  }
  const CollectiveKind dispatch_kind = allgather ? CollectiveKind::AllGather : CollectiveKind::AllToAll;
  const CollectiveKind combine_kind = allgather ? CollectiveKind::ReduceScatter : CollectiveKind::AllToAll;
  const double permute_bytes = allgather ? gathered + recv : permuted * 2;
  const bool ep_comm = p.ep > 1, etp_comm = etp > 1;
  const double act = D.tokens * D.h * D.act_bytes, act_norm = D.tokens_norm * D.h * D.act_bytes;
  const auto tp_out_kind = D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  const double shared_f = static_cast<double>(m.moe.shared_experts) * m.moe.shared_ffn / p.tp;
  const double up = D.up_mult;
  auto expert_flops = [&](double n, double kk) { return 2 * balanced * n * kk; };

  // ---------------- forward ----------------
  append_slice(dense.forward, 0, index_of(dense.forward, "norm2") + 1, &moe->forward);
  // The MoE block's pre-MLP norm is a norm of its own (TENorm before the router), which
  // writes 16 bits where the dense block's LayerNormLinear writes FP8 (te_norm_fp8_output).
  moe->forward[index_of(moe->forward, "norm2")].op.bytes = act_norm * 2 * recipe_of(tr, D.act_bytes, m).norm;
  {
    StepList L(&moe->forward, Pass::Forward, D.act_bytes, tr.fp8_recipe, fp8_cast_kernel(tr));
    L.gemm("moe.router", D.attn_dtype, rt.tokens_in, E, h);
    L.memory("moe.router.topk", rt.tokens_in * E * 4 * 3);  // fp32 scores: softmax / sigmoid, top-k
    if (!allgather) L.memory("moe.permute", permute_bytes);
    const int d =
        ep_comm ? L.comm("ep.dispatch", dispatch_kind, CommClass::EP, a2a, {}, false, false, dispatch_matrix) : -1;
    if (allgather) L.memory("moe.permute", permute_bytes, maybe(d));
    const int g =
        etp_comm ? L.comm("etp.ag.tokens", CollectiveKind::AllGather, CommClass::EP, etp * recv, maybe(d), false, true)
                 : -1;
    L.gemm("moe.expert.up", D.gemm_dtype, m_e, f_e * up, h, maybe2(d, g), local, expert_flops(f_e * up, h));
    L.memory("moe.expert.act", busiest * f_e * D.act_bytes * (D.swiglu ? 3 : 2));
    L.gemm("moe.expert.down", D.gemm_dtype, m_e, h, f_e, {}, local, expert_flops(h, f_e));
    const int rs =
        etp_comm ? L.comm("etp.rs.tokens", CollectiveKind::ReduceScatter, CommClass::EP, etp * recv, {}, false, true)
                 : -1;
    if (allgather) L.memory("moe.unpermute.local", permute_bytes);  // scatter the outputs into the gathered order
    const int c =
        ep_comm ? L.comm("ep.combine", combine_kind, CommClass::EP, a2a, maybe(rs), false, false, combine_matrix) : -1;
    int shared_out = -1;
    if (shared_f > 0) {
      const int ag = D.sp ? L.comm("tp.ag.shared", CollectiveKind::AllGather, CommClass::TP, act) : -1;
      L.gemm("moe.shared.up", D.gemm_dtype, D.tokens, shared_f * up, h, maybe2(ag, c));
      L.memory("moe.shared.act", D.tokens * shared_f * D.act_bytes * (D.swiglu ? 3 : 2));
      L.gemm("moe.shared.down", D.gemm_dtype, D.tokens, h, shared_f);
      shared_out = D.tp_comm ? L.comm("tp.shared.out", tp_out_kind, CommClass::TP, act) : -1;
    }
    L.memory("moe.unpermute", permuted * 2 + rt.tokens_in * h * D.act_bytes, maybe2(c, shared_out));
    L.memory("mlp.residual", act_norm * (D.dropout ? 3.5 : 3));
  }

  // ---------------- backward ----------------
  {
    StepList L(&moe->backward, Pass::BackwardInput, D.act_bytes, tr.fp8_recipe, fp8_cast_kernel(tr));
    const auto tp_in_kind = D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
    // The same fork as the dense MLP's: the framework's kernels, not the fused lists'.
    residual_backward(L, "mlp.residual.bwd", D, recipe_of(tr, D.act_bytes, m), act_norm);
    L.memory("moe.unpermute.bwd", permute_bytes);
    // The gradient of a reduce-scatter is an all-gather and vice versa.
    const int cb =
        ep_comm ? L.comm("ep.combine.bwd", dispatch_kind, CommClass::EP, a2a, {}, false, false, dispatch_matrix) : -1;
    const int g = etp_comm ? L.comm("etp.ag.tokens.grad", CollectiveKind::AllGather, CommClass::EP, etp * recv,
                                    maybe(cb), false, true)
                           : -1;
    const std::vector<int> arrived = maybe2(cb, g);
    L.gemm("moe.expert.down.dgrad", D.gemm_dtype, m_e, f_e, h, arrived, local, expert_flops(f_e, h));
    L.set_pass(Pass::BackwardWeight);
    L.gemm("moe.expert.down.wgrad", D.gemm_dtype, h, f_e, m_e, arrived, local, expert_flops(h, f_e));
    L.set_pass(Pass::BackwardInput);
    L.memory("moe.expert.act.bwd", busiest * f_e * D.act_bytes * (D.swiglu ? 5 : 3));
    L.gemm("moe.expert.up.dgrad", D.gemm_dtype, m_e, h, f_e * up, {}, local, expert_flops(h, f_e * up));
    L.set_pass(Pass::BackwardWeight);
    L.gemm("moe.expert.up.wgrad", D.gemm_dtype, h, f_e * up, m_e, arrived, local, expert_flops(h, f_e * up));
    L.set_pass(Pass::BackwardInput);
    const int rs = etp_comm ? L.comm("etp.rs.tokens.grad", CollectiveKind::ReduceScatter, CommClass::EP, etp * recv, {},
                                     false, true)
                            : -1;
    const int db =
        ep_comm ? L.comm("ep.dispatch.bwd", combine_kind, CommClass::EP, a2a, maybe(rs), false, false, combine_matrix)
                : -1;
    int shared_in = -1;
    if (shared_f > 0) {
      const int ag = D.sp ? L.comm("tp.ag.shared.grad", CollectiveKind::AllGather, CommClass::TP, act) : -1;
      L.gemm("moe.shared.down.dgrad", D.gemm_dtype, D.tokens, shared_f, h, maybe(ag));
      L.set_pass(Pass::BackwardWeight);
      L.gemm("moe.shared.down.wgrad", D.gemm_dtype, h, shared_f, D.tokens, maybe(ag));
      L.set_pass(Pass::BackwardInput);
      L.memory("moe.shared.act.bwd", D.tokens * shared_f * D.act_bytes * (D.swiglu ? 5 : 3));
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

// Steps of `in` appended to `out` as module `prefix` (names prefixed, waits re-indexed).
void append_module(const std::vector<Step>& in, const std::string& prefix, std::vector<Step>* out) {
  const std::size_t first = out->size();
  append_slice(in, 0, in.size(), out);
  for (std::size_t j = first; j < out->size(); ++j) (*out)[j].name = prefix + (*out)[j].name;
}

// Multi-token prediction (DeepSeek-V3 report, arXiv:2412.19437, Section 2.2),
// on the last stage after the LM head: per depth k, RMSNorms of the previous
// depth's hidden state and of the embeddings of the tokens k ahead (the
// shared embedding), their concatenation projected from 2h to h (every TP
// rank on its sequence shard), one transformer block of the last layer's
// kind, and the shared output head with its loss. Backward: depth D first,
// the LM head's last. The blocks are not recomputed.
void add_mtp_modules(const TransformerSpec& m, const Dims& D, ModelSteps* out) {
  const LayerSteps& block = out->of(m.layer_kind(m.layers - 1));
  const std::vector<Step> head_f = out->head_forward, head_b = out->head_backward;
  const double act_norm = D.tokens_norm * D.h * D.act_bytes;
  auto proj_flops = [&D](double rows, double cols, double inner) {
    return D.sp ? -1.0 : replicated_flops(D, rows, cols, inner);  // without SP every TP rank runs all tokens
  };
  std::vector<std::vector<Step>> module_backward;
  for (int k = 1; k <= m.mtp_depth; ++k) {
    const std::string prefix = "mtp" + std::to_string(k) + ".";
    {
      StepList L(&out->head_forward, Pass::Forward, D.act_bytes);
      L.memory(prefix + "embed.lookup", act_norm * 2);
      L.memory(prefix + "norms", act_norm * 4);
      L.memory(prefix + "concat", act_norm * 4);
      L.gemm(prefix + "proj", D.gemm_dtype, D.tokens_norm, D.h, 2 * D.h, {}, 1,
             proj_flops(D.tokens_norm, D.h, 2 * D.h));
    }
    append_module(block.forward, prefix, &out->head_forward);
    append_module(head_f, prefix, &out->head_forward);
    std::vector<Step>& b = module_backward.emplace_back();
    append_module(head_b, prefix, &b);
    append_module(block.backward, prefix, &b);
    StepList L(&b, Pass::BackwardInput, D.act_bytes);
    L.gemm(prefix + "proj.dgrad", D.gemm_dtype, D.tokens_norm, 2 * D.h, D.h, {}, 1,
           proj_flops(D.tokens_norm, 2 * D.h, D.h));
    L.set_pass(Pass::BackwardWeight);
    L.gemm(prefix + "proj.wgrad", D.gemm_dtype, 2 * D.h, D.h, D.tokens_norm, {}, 1,
           proj_flops(2 * D.h, D.h, D.tokens_norm));
    L.set_pass(Pass::BackwardInput);
    L.memory(prefix + "norms.bwd", act_norm * 8);
    L.memory(prefix + "embed.grad", D.tokens_norm * D.h * (D.act_bytes + 4 + 4));  // into the shared embedding
  }
  std::vector<Step> backward;
  for (auto it = module_backward.rbegin(); it != module_backward.rend(); ++it)
    append_slice(*it, 0, it->size(), &backward);
  append_slice(head_b, 0, head_b.size(), &backward);
  out->head_backward = std::move(backward);
  out->head_grad_elements += m.mtp_depth * (2.0 * D.h * D.h + 2 * D.h + block.grad_elements);
  out->head_expert_grad_elements += m.mtp_depth * block.expert_grad_elements;
}

// The dispatcher calls without a kernel in one layer of Megatron-DeepSpeed's model code
// with its unfused attention (bigscience-workshop/Megatron-DeepSpeed, megatron/model/
// transformer.py and fused_softmax.py, 2022), each a tensor view the host builds while
// the GPU has nothing queued under blocking launches. Forward: ParallelAttention's
// mixed_x_layer.view, the torch.split of split_tensor_along_last_dim, the query and key
// views, three transposes for baddbmm, the scores' view, the value and probabilities'
// views, the value's transpose, the context's view, permute and view, and the layer's
// two bias expand_as: 16; FusedScaleMaskSoftmax's view in and out of the fused 16-bit
// kernel: 2; the scores' buffer: torch.empty without ALiBi, the slice of the ALiBi
// tensor with it (alibi[:b*np, :, :sk], two slice calls): 1 or 2.
int megatron_ds_forward_host_ops(const TransformerSpec& m, const Dims& D) {
  return 16 + (D.act_bytes < 4 ? 2 : 0) + (m.alibi ? 2 : 1);
}
// Backward: the autograd nodes of those views whose gradient is another view (ten
// ViewBackward, four TransposeBackward, one PermuteBackward; the split's and the
// expands' backward launch kernels, charged as attn.qkv.split.bwd and the bias gradients).
constexpr int kMegatronDsBackwardHostOps = 15;

// Puts `n` kernel-less dispatcher calls on the first compute step of `steps`.
void set_host_ops(std::vector<Step>* steps, int n) {
  for (Step& s : *steps) {
    if (s.is_comm) continue;
    s.op.host_ops = n;
    return;
  }
}

// The nn.Module calls of one pass of Megatron-DeepSpeed's ParallelTransformerLayerPipe
// (megatron/model/transformer.py, 2022): the layer itself, its two LayerNorms, ParallelAttention
// with its QKV ColumnParallelLinear, FusedScaleMaskSoftmax, attention Dropout and output
// RowParallelLinear, ParallelMLP with its two linear layers: 11.
constexpr int kMegatronDsLayerModuleCalls = 11;

// The rest of a Megatron-DeepSpeed layer pass's host work that blocking launches expose
// (docs/frameworks.md, "Blocking launches"), on the first compute step of `steps`: its
// nn.Module calls, the autograd nodes it records when `records_grad` (one per op: each
// kernel, kernel-less call and communication of the pass), `backward_calls` Python calls
// of torch.autograd.backward, and the blocking launch of each of its collectives.
void set_layer_host_work(std::vector<Step>* steps, int module_calls, bool records_grad, int backward_calls) {
  int ops = 0, comms = 0;
  for (const Step& s : *steps) {
    if (s.is_comm) {
      ++comms;
    } else {
      ops += s.op.kernels + s.op.host_ops;
    }
  }
  for (Step& s : *steps) {
    if (s.is_comm) continue;
    s.op.module_calls = module_calls;
    s.op.autograd_records = records_grad ? ops + comms : 0;
    s.op.backward_calls = backward_calls;
    s.op.comm_launches = comms;
    return;
  }
}

// The backward of a block's residual add on `act_norm` bytes of activations: a read +
// write of the gradient in the fused lists. Where autograd runs the block op by op the
// add's own backward launches nothing, but the gradient of the tensor that forks into
// the next norm and the residual is the sum of the two (torch/csrc/autograd/
// input_buffer.cpp, InputBuffer::add: one add, read 2 + write 1), and residual dropout
// multiplies the branch's gradient by its mask (read the gradient and the 1-byte mask,
// write). Two forks per layer, one charged at each residual add's backward.
void residual_backward(StepList& L, const char* name, const Dims& D, const KernelRecipe& R, double act_norm) {
  if (!R.residual_fork_sum) {
    L.memory(name, act_norm * 2);
    return;
  }
  const double dropout = D.dropout ? act_norm * 2 + act_norm / D.act_bytes : 0;
  L.memory(name, act_norm * 3 + dropout, {}, D.dropout ? 2 : 1);
}

// The MLP's backward from its output's gradient to its activation's input gradient:
// the down projection's data and weight gradients, then the activation's backward.
// `g` is the gradient's all-gather under sequence parallelism (-1 without); with TP
// overlap (`ov`) it runs alongside the dgrad and the wgrad waits for it. Sequential
// and parallel blocks share these steps. `fp8_grad`: the gathered gradient arrives in FP8
// (te_fp8_gradient_gather): the data-gradient GEMM reads it without a cast and the weight
// gradient reads its FP8 transpose (`transpose_kernel`).
void mlp_down_backward(StepList& L, const Dims& D, const KernelRecipe& R, int g, bool ov, bool fp8_grad = false,
                       MemoryKernel transpose_kernel = MemoryKernel::Generic) {
  // With TP overlap the output gradient's all-gather is a ring exchange: tp chunks (fc2_dgrad).
  const int split = ov ? static_cast<int>(D.t) : 1;
  L.gemm("mlp.down.dgrad", D.gemm_dtype, D.tokens / split, D.f_t, D.h, ov ? std::vector<int>{} : maybe(g), split, -1,
         split, fp8_grad);
  L.set_pass(Pass::BackwardWeight);
  std::vector<int> wgrad_waits = ov ? maybe(g) : std::vector<int>{};
  if (fp8_grad) {
    L.memory("mlp.down.grad.fp8transpose", D.tokens * D.h * 2.0, std::move(wgrad_waits), 1, transpose_kernel);
    wgrad_waits = {};
  }
  L.gemm("mlp.down.wgrad", D.gemm_dtype, D.h, D.f_t, D.tokens, std::move(wgrad_waits));
  L.set_pass(Pass::BackwardInput);
  L.memory("mlp.act.bwd", D.tokens * D.f_t * D.act_bytes * (D.swiglu ? 5 * R.swiglu_bwd : 3), {},
           D.swiglu ? R.swiglu_bwd_kernels : 1);
}

// A parallel attention + MLP block (GPT-J, GPT-NeoX's use_parallel_residual, PaLM,
// Chowdhery et al. 2022, Section 2): y = x + Attention(LN(x)) + MLP(LN(x)). One norm,
// the QKV and MLP input projections fused into one GEMM, and the two row-parallel
// output projections summed before one TP reduction per layer (forward and backward)
// instead of two.
void parallel_block_layer(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr, const Dims& D,
                          const KernelRecipe& R, LayerSteps* out) {
  const auto tp_kind = D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  const double act = D.tokens * D.h * D.act_bytes, act_norm = D.tokens_norm * D.h * D.act_bytes;
  const double kv_bytes = D.b * D.kv_seq * 2 * D.g_t * D.d * D.act_bytes;
  const double qkv = (D.a_t + 2 * D.g_t) * D.d, up = D.f_t * D.up_mult, in_n = qkv + up;
  const bool ov = p.tp_comm_overlap && D.tp_comm;
  auto gate = [&](int c) { return ov ? std::vector<int>{} : maybe(c); };
  auto after = [&](int c) { return ov ? maybe(c) : std::vector<int>{}; };
  // x + attention + MLP: one more input than the sequential block's residual add.
  const double residual = act_norm * (D.dropout ? 3.5 * R.residual_dropout : 3) + act_norm;
  const int residual_kernels = D.dropout ? R.residual_dropout_kernels : 1;
  const double cast_bytes =
      m.params_per_layer_per_tp_rank(p.tp) * (4 + D.act_bytes) * (R.casts_sharded ? 1.0 / p.dp : 1.0);
  const int cast_kernels = weight_cast_kernels(R, D.swiglu);
  {
    StepList L(&out->forward, Pass::Forward, D.act_bytes, tr.fp8_recipe, fp8_cast_kernel(tr));
    if (R.weight_casts) L.memory("amp.weight.cast", cast_bytes, {}, cast_kernels);
    L.memory("norm1", act_norm * 2 * R.norm, {}, R.norm_kernels, R.norm_impl);
    const int ag = D.sp ? L.comm("tp.ag.block", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("block.in", D.gemm_dtype, D.tokens, in_n, D.h, gate(ag));
    std::vector<int> core_waits = after(ag);
    if (m.rope) {
      L.memory("attn.rope", D.tokens * (D.a_t + D.g_t) * D.d * D.act_bytes * 2 * R.rope, core_waits, R.rope_kernels);
      core_waits.clear();
    }
    const bool ring_steps = ring_steps_apply(D, tr.attention);
    const int kv =
        D.ring > 1 && !ring_steps ? L.comm("cp.ag.kv", CollectiveKind::AllGather, CommClass::CP, kv_bytes) : -1;
    if (kv >= 0) core_waits.push_back(kv);
    if (ring_steps) {
      ring_attention_forward(L, D, tr.attention, core_waits, Step::CpGroup::All);
    } else {
      attention_core_forward(L, D, tr.attention, core_waits);
    }
    L.memory("mlp.act", D.tokens * D.f_t * D.act_bytes * (D.swiglu ? 3 * R.swiglu : 2), {},
             D.swiglu ? R.swiglu_kernels : 1);
    L.gemm("attn.proj", D.gemm_dtype, D.tokens, D.h, D.a_t * D.d_out);
    L.gemm("mlp.down", D.gemm_dtype, D.tokens, D.h, D.f_t);
    const int r = D.tp_comm ? L.comm("tp.block.out", tp_kind, CommClass::TP, act, {}, ov) : -1;
    L.memory("block.residual", residual, maybe(r), residual_kernels);
  }
  {
    StepList L(&out->backward, Pass::BackwardInput, D.act_bytes, tr.fp8_recipe, fp8_cast_kernel(tr));
    L.memory("block.residual.bwd", act_norm * 2);
    const int g = D.sp ? L.comm("tp.ag.block.grad", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    mlp_down_backward(L, D, R, g, ov);
    L.gemm("attn.proj.dgrad", D.gemm_dtype, D.tokens, D.a_t * D.d_out, D.h);
    L.set_pass(Pass::BackwardWeight);
    L.gemm("attn.proj.wgrad", D.gemm_dtype, D.h, D.a_t * D.d_out, D.tokens, after(g));
    L.set_pass(Pass::BackwardInput);
    const bool ring_steps = ring_steps_apply(D, tr.attention);
    if (ring_steps) {
      ring_attention_backward(L, D, tr.attention, {}, Step::CpGroup::All);
    } else {
      attention_core_backward(L, D, tr.attention, {});
    }
    const int rkv = D.ring > 1 && !ring_steps
                        ? L.comm("cp.rs.kv.grad", CollectiveKind::ReduceScatter, CommClass::CP, kv_bytes)
                        : -1;
    if (m.rope)
      L.memory("attn.rope.bwd", D.tokens * (D.a_t + D.g_t) * D.d * D.act_bytes * 2 * R.rope_bwd, {}, R.rope_kernels);
    const int in = D.sp ? L.comm("tp.ag.block.input", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("block.in.dgrad", D.gemm_dtype, D.tokens, D.h, in_n, maybe(rkv));
    const int rs = D.tp_comm ? L.comm("tp.block.in.grad", tp_kind, CommClass::TP, act) : -1;
    L.set_pass(Pass::BackwardWeight);
    L.gemm("block.in.wgrad", D.gemm_dtype, D.h, in_n, D.tokens, maybe(p.tp_grad_overlap || D.sp ? in : rs));
    L.set_pass(Pass::BackwardInput);
    L.memory("norm1.bwd", act_norm * 4 * R.norm_bwd + R.norm_bwd_partial_bytes * D.h, maybe(rs), R.norm_bwd_kernels,
             R.norm_bwd_impl);
    if (R.casts_sharded) L.memory("fsdp.weight.cast.bwd", cast_bytes, {}, cast_kernels);
  }
}

}  // namespace

ModelSteps build_model_steps(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& train,
                             const std::vector<int>& ep_node, SequenceChunk chunk) {
  // A sequence chunk is a micro-batch of seq_len / count tokens (every token-wise
  // step) whose queries attend to the keys of the chunks up to it: a causal kernel
  // runs the (index + 1/2) / (index + 1) of those tiles; model FLOPs count the
  // chunk's share of the whole sequence's attention (arXiv:2406.03488).
  TrainingSpec tr = train;
  tr.seq_len = train.seq_len / chunk.count;
  Dims D = dims_of(m, p, tr);
  if (chunk.count > 1) {
    D.s_full = static_cast<double>(tr.seq_len) * (chunk.index + 1);
    D.causal = (chunk.index + 0.5) / (chunk.index + 1);
    D.s_model = train.seq_len;
    D.kv_seq = D.s_full;
  }
  ModelSteps out;
  // The dense layer (attention + MLP); other layer kinds get their own steps here.
  LayerSteps& dense = out.by_kind[static_cast<std::size_t>(LayerKind::Dense)];
  const auto tp_out_kind = D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  const double act = D.tokens * D.h * D.act_bytes;            // one hidden-state tensor, full tokens
  const double act_norm = D.tokens_norm * D.h * D.act_bytes;  // the same where SP shards it
  const Dims A = attention_view(D);
  const double kv_bytes = A.b * D.kv_seq * 2 * A.g_t * A.d * D.act_bytes;  // K and V gathered over the ring
  // Ulysses all-to-alls of one rank (arXiv:2309.14509): its sequence
  // shard of Q, K and V (all heads of its TP rank) before attention, of the output after.
  // K and V heads fewer than the Ulysses degree are replicated so that every member
  // receives one (attention_view): each is sent to every member that needs it.
  const double kv_sent = D.ulysses > 1 ? std::max(D.g_t, static_cast<double>(D.ulysses)) : D.g_t;
  double qkv_bytes = D.tokens * (D.a_t + 2 * kv_sent) * D.d * D.act_bytes;
  double out_bytes = D.tokens * D.a_t * D.d_out * D.act_bytes;
  // Uneven shares: all-to-all-v with the per-pair bytes of the shares.
  UlyssesMatrices um;
  if (!D.u_q.empty()) {
    um = ulysses_matrices(D, &out.traffic);
    qkv_bytes = um.qkv_bytes;
    out_bytes = um.out_bytes;
  }
  const bool hybrid = D.ulysses > 1 && D.ring > 1;
  const bool ring_steps = ring_steps_apply(A, tr.attention);
  const Step::CpGroup ulysses_group = hybrid ? Step::CpGroup::Ulysses : Step::CpGroup::All;
  const Step::CpGroup ring_group = hybrid ? Step::CpGroup::Ring : Step::CpGroup::All;
  auto cp_step = [&](StepList& L, const char* name, CollectiveKind kind, double bytes, Step::CpGroup g,
                     std::vector<int> waits, int matrix = -1) {
    return L.comm(name, kind, CommClass::CP, bytes, std::move(waits), false, false, matrix, g);
  };
  // TP communication overlap (Megatron/TE userbuffers): a collective runs alongside the
  // GEMM next to it; the step after the GEMM waits for it instead of the GEMM.
  const bool ov = p.tp_comm_overlap && D.tp_comm;
  auto gate = [&](int c) { return ov ? std::vector<int>{} : maybe(c); };
  auto after = [&](int c) { return ov ? maybe(c) : std::vector<int>{}; };
  // Transformer Engine's userbuffers split an overlapped GEMM into chunks (initialize_ub,
  // transformer_engine/pytorch/module/base.py, v1.8): an all-gather overlapped by ring exchange
  // (qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad) runs one GEMM per TP rank's shard of the
  // tokens (num_splits = tp); a reduce-scatter overlapped by the pipeline method (proj_fprop,
  // fc2_fprop) runs num_splits = 4 GEMMs of a quarter of the rows each. The bulk overlaps of
  // the backward (qkv and fc1 dgrad and wgrad) run the GEMM whole.
  const int ag_split = ov ? p.tp : 1;
  const int rs_split = ov ? kUserbufferPipelineSplits : 1;
  KernelRecipe R = recipe_of(tr, D.act_bytes, m);
  if (D.act_bytes >= 4) R.weight_casts = false;  // FP32 training: no 16-bit weight copies to cast
  // ZeRO-3 gathers 16-bit parameters (the planner's all-gathers), which under PyTorch FSDP is
  // MixedPrecision(param_dtype=16-bit): each unshard casts the rank's fp32 shard first
  // (FlatParamHandle.pre_unshard -> _use_low_precision_shard, torch/distributed/fsdp/
  // flat_param.py), in the forward and again for the backward's re-gather, and autocast then
  // finds 16-bit weights and casts none. FSDP1 (eager, torch.compile) casts the wrapped
  // block's flat parameter in one copy_.
  if (R.weight_casts && !R.casts_sharded && p.zero >= 3 && p.dp > 1) R.casts_sharded = R.casts_flat = true;
  // A model that splits a fused QKV output (llm-foundry's MPT: qkv.chunk / qkv.split before
  // its attention function) gets the split's backward cat under the eager lists, as
  // Megatron-DeepSpeed's torch.split does under DeepSpeed's.
  if (m.qkv_split && (tr.framework == Framework::Eager || tr.framework == Framework::Fsdp2)) R.qkv_split_grad = true;
  const double residual = act_norm * (D.dropout ? 3.5 * R.residual_dropout : 3);
  const int residual_kernels = D.dropout ? R.residual_dropout_kernels : 1;
  // Linear-layer biases (the reader allows them on the standard dense block only).
  const bool bias = m.bias && !m.parallel_block && !m.mla.enabled();
  const double qkv_out = D.tokens * (D.a_t + 2 * D.g_t) * D.d * D.act_bytes;  // one QKV output, this rank
  // fp32 -> 16-bit weight casts: read 4 + write 2 bytes per weight of this rank.
  const double cast_share = R.casts_sharded ? 1.0 / p.dp : 1.0;
  const double cast_bytes = m.params_per_layer_per_tp_rank(p.tp) * (4 + 2) * cast_share;
  const int cast_kernels = weight_cast_kernels(R, D.swiglu);
  const double head_cast_bytes = static_cast<double>(m.vocab) * m.hidden / p.tp * (4 + 2) * cast_share;

  // Transformer Engine's LayerNormLinear in FP8 (te_norm_fp8_output): the norms in front of
  // the QKV projection (not under MLA, whose projections are built apart) and of the MLP input
  // projection write FP8 (read 16 bits, write 1 B per element), the sequence-parallel
  // all-gathers of those outputs move FP8, forward and backward, the GEMMs read them without
  // a cast, and each weight gradient reads an FP8 transpose of the gathered copy (2 B per
  // element, Transformer Engine's tiled transpose, charged at its cast-transpose's rate).
  const bool ln_fp8 = te_norm_fp8_output(tr) && !m.parallel_block;
  const bool ln_fp8_attn = ln_fp8 && !m.mla.enabled();
  const double fp8_norm = act_norm * (1.0 + 1.0 / D.act_bytes) * R.norm, fp8_act = act / D.act_bytes;
  // Transformer Engine's row-parallel Linear (the attention and MLP output projections) under
  // FP8 with sequence parallelism (te_fp8_gradient_gather): the backward casts the rank's shard
  // of the output gradient to FP8 (read 16 bits, write 1 B per element; no figure of its own:
  // the curve), all-gathers the FP8 tensor (or exchanges FP8 chunks in the userbuffers ring),
  // the data-gradient GEMM reads it without a cast, and the weight gradient reads an FP8
  // transpose of the gathered tensor (read 1 B, write 1 B).
  const bool grad_fp8 = te_fp8_gradient_gather(tr) && D.sp && !m.mla.enabled();
  const double grad_shard_cast = D.tokens_norm * D.h * (D.act_bytes + 1.0);

  if (m.parallel_block) parallel_block_layer(m, p, tr, D, R, &dense);
  // ---------------- forward of one layer ----------------
  if (!m.parallel_block) {
    StepList L(&dense.forward, Pass::Forward, D.act_bytes, tr.fp8_recipe, fp8_cast_kernel(tr));
    if (R.weight_casts) L.memory("amp.weight.cast", cast_bytes, {}, cast_kernels);
    L.memory("norm1", ln_fp8_attn ? fp8_norm : act_norm * 2 * R.norm, {}, R.norm_kernels, R.norm_impl);
    const int ag1 =
        D.sp ? L.comm("tp.ag.attn", CollectiveKind::AllGather, CommClass::TP, ln_fp8_attn ? fp8_act : act) : -1;
    if (m.mla.enabled()) {
      mla_projections_forward(L, m, D, gate(ag1));
    } else {
      L.gemm("attn.qkv", D.gemm_dtype, D.tokens / ag_split, (D.a_t + 2 * D.g_t) * D.d, D.h, gate(ag1), ag_split, -1,
             ag_split, ln_fp8_attn);
    }
    std::vector<int> core_waits = after(ag1);
    if (bias && R.bias_add) {
      L.memory("attn.qkv.bias", qkv_out * 2, core_waits);  // read + write the QKV output
      core_waits.clear();
    }
    if (m.rope) {
      L.memory("attn.rope", D.tokens * (D.a_t + D.g_t) * D.d * D.act_bytes * 2 * R.rope, core_waits, R.rope_kernels);
      core_waits.clear();
    }
    // Megatron-Core's batch-major layout around Transformer Engine's attention (recipe_of).
    if (R.rope_bshd_copies) L.memory("attn.v.copy", D.tokens * D.g_t * D.d * D.act_bytes * 2);
    const int a2a =
        D.ulysses > 1 ? cp_step(L, "cp.a2a.qkv", CollectiveKind::AllToAll, qkv_bytes, ulysses_group, {}, um.qkv) : -1;
    const int kv = D.ring > 1 && !ring_steps
                       ? cp_step(L, "cp.ag.kv", CollectiveKind::AllGather, kv_bytes, ring_group, maybe(a2a))
                       : -1;
    if (a2a >= 0) core_waits.push_back(a2a);
    if (kv >= 0) core_waits.push_back(kv);
    if (ring_steps) {
      ring_attention_forward(L, A, tr.attention, core_waits, ring_group);
    } else {
      attention_core_forward(L, A, tr.attention, core_waits);
    }
    if (R.rope_bshd_copies && D.b > 1) L.memory("attn.out.copy", D.tokens * D.a_t * D.d_out * D.act_bytes * 2);
    const int a2a_out =
        D.ulysses > 1 ? cp_step(L, "cp.a2a.out", CollectiveKind::AllToAll, out_bytes, ulysses_group, {}, um.out) : -1;
    L.gemm("attn.proj", D.gemm_dtype, D.tokens / rs_split, D.h, D.a_t * D.d_out, maybe(a2a_out), rs_split, -1,
           rs_split);
    const int r1 = D.tp_comm ? L.comm("tp.attn.out", tp_out_kind, CommClass::TP, act, {}, ov) : -1;
    L.memory("attn.residual", residual, maybe(r1), residual_kernels);  // bias-dropout-add (+ mask)
    L.memory("norm2", ln_fp8 ? fp8_norm : act_norm * 2 * R.norm, {}, R.norm_kernels, R.norm_impl);
    const int ag2 = D.sp ? L.comm("tp.ag.mlp", CollectiveKind::AllGather, CommClass::TP, ln_fp8 ? fp8_act : act) : -1;
    L.gemm("mlp.up", D.gemm_dtype, D.tokens / ag_split, D.f_t * D.up_mult, D.h, gate(ag2), ag_split, -1, ag_split,
           ln_fp8);
    L.memory("mlp.act", D.tokens * D.f_t * D.act_bytes * (D.swiglu ? 3 * R.swiglu : 2), after(ag2),
             D.swiglu ? R.swiglu_kernels : 1);
    L.gemm("mlp.down", D.gemm_dtype, D.tokens / rs_split, D.h, D.f_t, {}, rs_split, -1, rs_split);
    const int r2 = D.tp_comm ? L.comm("tp.mlp.out", tp_out_kind, CommClass::TP, act, {}, ov) : -1;
    L.memory("mlp.residual", residual, maybe(r2), residual_kernels);
  }

  // ---------------- backward of one layer ----------------
  if (!m.parallel_block) {
    StepList L(&dense.backward, Pass::BackwardInput, D.act_bytes, tr.fp8_recipe, fp8_cast_kernel(tr));
    const auto tp_in_kind = D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
    // MLP block, in reverse.
    residual_backward(L, "mlp.residual.bwd", D, R, act_norm);
    if (grad_fp8) L.memory("mlp.down.grad.fp8cast", grad_shard_cast);
    const int g1 =
        D.sp ? L.comm("tp.ag.mlp.grad", CollectiveKind::AllGather, CommClass::TP, grad_fp8 ? fp8_act : act) : -1;
    mlp_down_backward(L, D, R, g1, ov, grad_fp8, fp8_cast_kernel(tr));
    // MLP bias gradients: the down projection's over the block output's gradient,
    // the up projection's over the activation's input gradient.
    if (bias && R.bias_grad) L.memory("mlp.bias.grad", act_norm + D.tokens * D.f_t * D.act_bytes, {}, 2);
    if (bias && R.bias_grad_up) L.memory("mlp.bias.grad", D.tokens * D.f_t * D.up_mult * D.act_bytes);
    const int in2 =
        D.sp ? L.comm("tp.ag.mlp.input", CollectiveKind::AllGather, CommClass::TP, ln_fp8 ? fp8_act : act) : -1;
    L.gemm("mlp.up.dgrad", D.gemm_dtype, D.tokens, D.h, D.f_t * D.up_mult);
    const int rs2 = D.tp_comm ? L.comm("tp.mlp.in.grad", tp_in_kind, CommClass::TP, act) : -1;
    // Without async TP all-reduce the weight-gradient GEMM waits for the input gradient's
    // all-reduce (same total as running it after the GEMM, as the 2021 code did).
    const int wg2 = p.tp_grad_overlap || D.sp ? in2 : rs2;
    L.set_pass(Pass::BackwardWeight);
    if (ln_fp8) L.memory("mlp.up.fp8transpose", D.tokens * D.h * 2.0, maybe(wg2), 1, fp8_cast_kernel(tr));
    L.gemm("mlp.up.wgrad", D.gemm_dtype, D.h, D.f_t * D.up_mult, D.tokens, ln_fp8 ? std::vector<int>{} : maybe(wg2));
    L.set_pass(Pass::BackwardInput);
    L.memory("norm2.bwd", act_norm * 4 * R.norm_bwd + R.norm_bwd_partial_bytes * D.h, maybe(rs2), R.norm_bwd_kernels,
             R.norm_bwd_impl);
    // Attention block, in reverse.
    residual_backward(L, "attn.residual.bwd", D, R, act_norm);
    if (grad_fp8) L.memory("attn.proj.grad.fp8cast", grad_shard_cast);
    const int g2 =
        D.sp ? L.comm("tp.ag.attn.grad", CollectiveKind::AllGather, CommClass::TP, grad_fp8 ? fp8_act : act) : -1;
    L.gemm("attn.proj.dgrad", D.gemm_dtype, D.tokens / ag_split, D.a_t * D.d_out, D.h, gate(g2), ag_split, -1, ag_split,
           grad_fp8);
    L.set_pass(Pass::BackwardWeight);
    if (grad_fp8) {
      L.memory("attn.proj.grad.fp8transpose", D.tokens * D.h * 2.0, after(g2), 1, fp8_cast_kernel(tr));
    }
    L.gemm("attn.proj.wgrad", D.gemm_dtype, D.h, D.a_t * D.d_out, D.tokens, grad_fp8 ? std::vector<int>{} : after(g2));
    L.set_pass(Pass::BackwardInput);
    // Ulysses: the output gradient goes from sequence to head shards.
    const int gout = D.ulysses > 1 ? cp_step(L, "cp.a2a.out.grad", CollectiveKind::AllToAll, out_bytes, ulysses_group,
                                             {}, um.out_grad)
                                   : -1;
    std::vector<int> core_bwd_waits = maybe(gout);
    if (R.rope_bshd_copies && D.b > 1) {
      L.memory("attn.out.grad.copy", D.tokens * D.a_t * D.d_out * D.act_bytes * 2, std::move(core_bwd_waits));
      core_bwd_waits = {};
    }
    if (ring_steps) {
      ring_attention_backward(L, A, tr.attention, std::move(core_bwd_waits), ring_group);
    } else {
      attention_core_backward(L, A, tr.attention, std::move(core_bwd_waits));
    }
    const int rkv_ring = D.ring > 1 && !ring_steps
                             ? cp_step(L, "cp.rs.kv.grad", CollectiveKind::ReduceScatter, kv_bytes, ring_group, {})
                             : -1;
    // Ulysses: dQ, dK and dV go back from head to sequence shards.
    const int rkv = D.ulysses > 1 ? cp_step(L, "cp.a2a.qkv.grad", CollectiveKind::AllToAll, qkv_bytes, ulysses_group,
                                            maybe(rkv_ring), um.qkv_grad)
                                  : rkv_ring;
    if (m.rope)
      L.memory("attn.rope.bwd", D.tokens * (D.a_t + D.g_t) * D.d * D.act_bytes * 2 * R.rope_bwd, {}, R.rope_kernels);
    const int in1 =
        D.sp ? L.comm("tp.ag.attn.input", CollectiveKind::AllGather, CommClass::TP, ln_fp8_attn ? fp8_act : act) : -1;
    std::vector<int> qkv_waits = maybe(rkv);
    if (R.qkv_split_grad && !m.mla.enabled()) {
      L.memory("attn.qkv.split.bwd", qkv_out * 2, qkv_waits);
      qkv_waits.clear();
    }
    if (m.mla.enabled()) {
      mla_projections_dgrad(L, m, D, qkv_waits);
    } else if (bias && R.bias_grad) {
      // Attention bias gradients: the output projection's, and the QKV bias's over dQ, dK, dV.
      L.memory("attn.bias.grad", act_norm + qkv_out, qkv_waits, 2);
      L.gemm("attn.qkv.dgrad", D.gemm_dtype, D.tokens, D.h, (D.a_t + 2 * D.g_t) * D.d);
    } else {
      L.gemm("attn.qkv.dgrad", D.gemm_dtype, D.tokens, D.h, (D.a_t + 2 * D.g_t) * D.d, qkv_waits);
    }
    const int rs1 = D.tp_comm ? L.comm("tp.attn.in.grad", tp_in_kind, CommClass::TP, act) : -1;
    const int wg1 = p.tp_grad_overlap || D.sp ? in1 : rs1;
    L.set_pass(Pass::BackwardWeight);
    if (m.mla.enabled()) {
      mla_projections_wgrad(L, m, D, maybe(wg1));
    } else {
      if (ln_fp8_attn) L.memory("attn.qkv.fp8transpose", D.tokens * D.h * 2.0, maybe(wg1), 1, fp8_cast_kernel(tr));
      L.gemm("attn.qkv.wgrad", D.gemm_dtype, D.h, (D.a_t + 2 * D.g_t) * D.d, D.tokens,
             ln_fp8_attn ? std::vector<int>{} : maybe(wg1));
    }
    L.set_pass(Pass::BackwardInput);
    L.memory("norm1.bwd", act_norm * 4 * R.norm_bwd + R.norm_bwd_partial_bytes * D.h, maybe(rs1), R.norm_bwd_kernels,
             R.norm_bwd_impl);
    if (R.casts_sharded) L.memory("fsdp.weight.cast.bwd", cast_bytes, {}, cast_kernels);  // re-gather for backward
  }

  // Megatron-DeepSpeed's layer code runs dispatcher calls that launch no kernel
  // (docs/frameworks.md, "Blocking launches"): with blocking launches the GPU waits
  // for each, so the layer's forward (and its recomputation, a copy) and backward carry them.
  if (tr.framework == Framework::DeepSpeed && !m.parallel_block && !m.mla.enabled() && !m.moe.enabled() &&
      tr.attention == AttentionKind::Unfused) {
    set_host_ops(&dense.forward, megatron_ds_forward_host_ops(m, D));
    set_host_ops(&dense.backward, kMegatronDsBackwardHostOps);
  }

  // ---------------- recomputation before backward ----------------
  if (p.recompute == Recompute::Full) {
    // Sharded casts: the recomputed forward runs on the weights gathered (and cast) for backward.
    dense.recompute =
        full_recompute_of(R.casts_sharded ? without_first(dense.forward, "amp.weight.cast") : dense.forward, p, D);
  } else if (p.recompute == Recompute::Selective &&
             (tr.attention == AttentionKind::Unfused || tr.framework == Framework::MegatronTe)) {
    // Selective recomputation reruns the attention core before its backward. Megatron-LM's
    // legacy model checkpoints only its unfused core (ParallelAttention skips the checkpoint
    // for flash attention); Megatron-Core checkpoints whatever core attention the layer runs,
    // Transformer Engine's fused kernels included (Attention.forward calls
    // _checkpointed_attention_forward when recompute_granularity is "selective",
    // megatron/core/transformer/attention.py, core_r0.8.0).
    StepList L(&dense.recompute, Pass::Forward, D.act_bytes, tr.fp8_recipe, fp8_cast_kernel(tr));
    if (ring_steps) {
      // The checkpointed core is AttnFuncWithCPAndKVP2P.forward: its ring runs again.
      ring_attention_forward(L, A, tr.attention, {}, ring_group);
    } else {
      attention_core_forward(L, A, tr.attention, {});
    }
  }

  // The Python around those calls: module calls, autograd recording, NCCL launches, and with
  // full recomputation DeepSpeed's CheckpointFunction, whose forward runs the layer without
  // grad, whose recomputation records the graph and whose backward calls
  // torch.autograd.backward on it (deepspeed/runtime/activation_checkpointing/checkpointing.py).
  if (tr.framework == Framework::DeepSpeed && !m.parallel_block && !m.mla.enabled() && !m.moe.enabled() &&
      tr.attention == AttentionKind::Unfused) {
    const bool checkpointed = p.recompute == Recompute::Full;
    set_layer_host_work(&dense.forward, kMegatronDsLayerModuleCalls, !checkpointed, 0);
    if (checkpointed) set_layer_host_work(&dense.recompute, kMegatronDsLayerModuleCalls, true, 0);
    set_layer_host_work(&dense.backward, 0, false, checkpointed ? 1 : 0);
  }

  // ---------------- embedding (first stage) ----------------
  {
    StepList L(&out.embedding_forward, Pass::Forward, D.act_bytes);
    L.memory("embed.lookup", act * (m.rope || m.alibi ? 2 : 3) / (D.sp ? D.t : 1.0));
    // PyTorch's dense embedding backward (embedding_dense_backward_cuda, ATen
    // Embedding.cu and EmbeddingBackwardKernel.cu) returns a whole [rows, hidden] gradient
    // in the activation dtype: `at::zeros` of the table, then, above 3,072 tokens, the
    // indices radix-sorted and segmented, each token's row summed into fp32 partials
    // (compute_grad_weight: reads 2 B, writes 4 B) and the sums scattered into the table
    // (sum_and_scatter: reads 4 B, writes 2 B), about 14 launches; at most 3,072 tokens
    // one kernel reads each token's row and writes its sum. Learned positions are a second
    // table (max_seq_len rows, whole on every TP rank) with the same backward.
    // Megatron's gradient hooks then add that .grad into main_grad (the reduction dtype)
    // (`param.main_grad.add_(param.grad.data)`: Megatron-LM's DistributedDataParallel
    // with contiguous buffers, Megatron-Core's _make_param_hook) every micro-batch, where the linear
    // layers' weight gradients accumulate inside their GEMMs (docs/frameworks.md,
    // "The embedding's gradient").
    StepList B(&out.embedding_backward, Pass::BackwardWeight, D.act_bytes);
    const double tables = m.embedding_params_per_tp_rank(p.tp);
    const int table_count = m.rope || m.alibi ? 1 : 2;
    B.memory("embed.grad.zero", tables * D.act_bytes, {}, table_count);
    const bool sorted = D.tokens > 3072;
    B.memory("embed.grad", table_count * D.tokens * D.h * (sorted ? 2 * D.act_bytes + 8 : 2 * D.act_bytes), {},
             table_count * (sorted ? 14 : 1));
    const Framework f = tr.framework;
    if (tr.grad_accumulation == GradAccumulation::Fused &&
        (f == Framework::Default || f == Framework::MegatronTe || f == Framework::MegatronLegacy)) {
      B.memory("embed.grad.main", tables * (D.act_bytes + 2.0 * tr.grad_reduce_bytes), {}, table_count);
    }
  }
  // ---------------- final norm, LM head and loss (last stage) ----------------
  // The output layer sits outside the FP8 region of FP8 recipes (Megatron-core enters
  // Transformer Engine's fp8_autocast per transformer block), so it runs in 16-bit.
  {
    const double v_t = static_cast<double>(m.vocab) / p.tp;
    StepList L(&out.head_forward, Pass::Forward, D.act_bytes);
    if (R.weight_casts) L.memory("amp.head.cast", head_cast_bytes);
    L.memory("final.norm", act_norm * 2 * R.norm, {}, R.norm_kernels, R.norm_impl);
    const int ag = D.sp ? L.comm("tp.ag.head", CollectiveKind::AllGather, CommClass::TP, act) : -1;
    L.gemm("head.logits", D.attn_dtype, D.tokens, v_t, D.h, maybe(ag));
    L.memory("loss.xent", D.tokens * v_t * (D.act_bytes + 4 + 4) * R.xent, {}, R.xent_kernels);
    // The head's backward, whole (`wgrad`) or as Megatron-Core's deferral runs a deferred
    // micro-batch (core_r0.8.0 LinearWithGradAccumulationAndAsyncCommunication.backward: the
    // logit gradient is kept, and neither the input's re-gather nor the weight-gradient GEMM
    // runs; drain_embedding_wgrad_compute, megatron/core/utils.py, runs them later).
    auto head_backward = [&](std::vector<Step>* steps, bool wgrad) {
      StepList B(steps, Pass::BackwardInput, D.act_bytes);
      B.memory("loss.xent.bwd", D.tokens * v_t * (4 + D.act_bytes) * R.xent_bwd, {}, R.xent_bwd_kernels);
      // With SP the head's input is sequence-sharded: its backward gathers it
      // again for the weight gradient, issued before the input-gradient GEMM and
      // overlapped with it, as for every column-parallel linear (Megatron-LM
      // LinearWithGradAccumulationAndAsyncCommunication.backward).
      const int in = wgrad && D.sp ? B.comm("tp.ag.head.input", CollectiveKind::AllGather, CommClass::TP, act) : -1;
      B.gemm("head.dgrad", D.attn_dtype, D.tokens, D.h, v_t);
      const int rs = D.tp_comm
                         ? B.comm("tp.head.grad", D.sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce,
                                  CommClass::TP, act)
                         : -1;
      if (wgrad) {
        B.set_pass(Pass::BackwardWeight);
        B.gemm("head.wgrad", D.attn_dtype, D.h, v_t, D.tokens, maybe(p.tp_grad_overlap || D.sp ? in : rs));
        B.set_pass(Pass::BackwardInput);
      }
      B.memory("final.norm.bwd", act_norm * 4 * R.norm_bwd + R.norm_bwd_partial_bytes * D.h, maybe(rs),
               R.norm_bwd_kernels, R.norm_bwd_impl);
    };
    head_backward(&out.head_backward, true);
    if (tr.defer_embedding_wgrad) {
      head_backward(&out.head_backward_deferred, false);
      // What the flush runs per deferred micro-batch.
      if (D.sp) {
        StepList G(&out.head_wgrad_gather, Pass::BackwardWeight, D.act_bytes);
        G.comm("tp.ag.head.input", CollectiveKind::AllGather, CommClass::TP, act);
      }
      StepList W(&out.head_wgrad_gemm, Pass::BackwardWeight, D.act_bytes);
      W.gemm("head.wgrad", D.attn_dtype, D.h, v_t, D.tokens);
    }
    // The trainer's training metrics, after the micro-batch's backward (Composer's
    // Trainer._train_microbatch -> _eval_train_metrics: under torch.no_grad() and the
    // autocast context, each metric's update runs torch.nn.CrossEntropyLoss(reduction='sum')
    // on the logits the forward kept). Autocast runs cross_entropy in fp32: the cast of the
    // 16-bit logits, log_softmax and nll_loss, the eager list's loss forward (18 B per
    // 16-bit logit, 12 B without the cast in fp32 training); then four launches on scalars
    // and [tokens] vectors ((target != ignore_index).sum() and the two state additions).
    StepList M(&out.head_after_backward, Pass::BackwardInput, D.act_bytes);
    const double metric_bytes = D.act_bytes < 4 ? 18 : 12;
    for (int i = 0; i < tr.metric_cross_entropies; ++i) {
      M.memory("metric.xent", D.tokens * v_t * metric_bytes, {}, 3 + 4);
    }
  }

  dense.grad_elements = m.params_per_layer_per_tp_rank(p.tp);
  if (m.moe.enabled()) {
    const std::vector<RoutingDraw> draws = routing_draws(m, p, tr);
    LayerSteps& first = out.by_kind[static_cast<std::size_t>(LayerKind::Moe)];
    build_moe_layer(m, p, tr, D, dense, draws.front(), ep_node, &out.traffic, &first);
    if (draws.size() > 1) {
      out.moe_draws.push_back(first);
      for (std::size_t i = 1; i < draws.size(); ++i) {
        out.moe_draws.emplace_back();
        build_moe_layer(m, p, tr, D, dense, draws[i], ep_node, &out.traffic, &out.moe_draws.back());
      }
    }
  }
  out.embedding_grad_elements = m.embedding_params_per_tp_rank(p.tp);
  out.head_grad_elements = out.head_weight_elements = static_cast<double>(m.vocab) * m.hidden / p.tp;
  if (m.mtp_depth > 0) add_mtp_modules(m, D, &out);
  // Every kernel of these steps is issued by the framework's host code (docs/frameworks.md,
  // "Host dispatch"), or replayed from a captured CUDA graph ("CUDA graphs").
  const double host = issue_host_seconds(tr);
  const bool blocking = tr.launch_blocking;
  auto issue = [host, blocking](std::vector<Step>& steps, bool captured) {
    for (Step& s : steps) {
      if (s.is_comm) continue;
      s.op.host_dispatch_seconds = host;
      s.op.launch_blocking = blocking;
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
  for (LayerSteps& k : out.moe_draws) {
    issue(k.forward, layers_captured);
    issue(k.backward, layers_captured);
    issue(k.recompute, layers_captured);
  }
  issue(out.embedding_forward, all_captured);
  issue(out.embedding_backward, all_captured);
  issue(out.head_forward, all_captured);
  issue(out.head_backward, all_captured);
  issue(out.head_after_backward, all_captured);
  issue(out.head_backward_deferred, all_captured);
  issue(out.head_wgrad_gemm, all_captured);
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
  op.bytes = (2 * small * large + 2 * small * small) * 2.0 /* bf16 */ * 3 * kMuonNewtonSchulzSteps * layers;
  op.kernels = 3 * kMuonNewtonSchulzSteps * layers;
  return op;
}

double model_flops_per_iteration(const TransformerSpec& m, const TrainingSpec& tr, int global_batch) {
  const double h = m.hidden, d = m.head_dim(), s = tr.seq_len, a = m.heads;
  const double tokens = static_cast<double>(global_batch) * s;
  const double mult = m.mlp == MlpKind::SwiGlu ? 3.0 : 2.0;
  // Attention projections (weights a token multiplies) and the attention core
  // (QK^T and AV, full count), per token.
  double projections = h * (a * d) + 2 * h * (m.kv_heads * d) + (a * d) * h;
  // A sliding window bounds the keys per query.
  const double keys = m.sliding_window > 0 ? std::min(s, static_cast<double>(m.sliding_window)) : s;
  double core = 4 * keys * a * d;
  if (m.mla.enabled()) {
    // MLA (DeepSeek-V2 Section 2.1): the down- and up-projections, output from
    // the value heads; QK^T over qk_nope + qk_rope, AV over v_head_dim.
    const MlaSpec& x = m.mla;
    const double qk = x.qk_nope_dim + x.qk_rope_dim;
    projections = (x.q_lora_rank > 0 ? h * x.q_lora_rank + x.q_lora_rank * a * qk : h * a * qk) +
                  h * (x.kv_lora_rank + x.qk_rope_dim) + x.kv_lora_rank * a * (x.qk_nope_dim + x.v_head_dim) +
                  a * x.v_head_dim * h;
    core = 2 * keys * a * (qk + x.v_head_dim);
  }
  // A MoE layer: the router and, with balanced routing, top_k routed experts
  // and every shared expert per token (docs/moe.md).
  const double dense_mlp = mult * h * m.ffn_hidden;
  const double moe_mlp = h * m.moe.experts + mult * h *
                                                 (static_cast<double>(m.moe.top_k) * m.moe.expert_ffn +
                                                  static_cast<double>(m.moe.shared_experts) * m.moe.shared_ffn);
  double per_token = 0;
  for (int l = 0; l < m.layers; ++l) {
    per_token += 2 * (projections + (m.layer_kind(l) == LayerKind::Moe ? moe_mlp : dense_mlp)) + core;
  }
  per_token += 2 * h * m.vocab;  // LM head
  // Multi-token prediction: per depth the 2h -> h projection, one block of
  // the last layer's kind and the LM head again.
  const double last = m.layer_kind(m.layers - 1) == LayerKind::Moe ? moe_mlp : dense_mlp;
  per_token += m.mtp_depth * (2 * (2 * h * h) + 2 * (projections + last) + core + 2 * h * m.vocab);
  return 3 * tokens * per_token;  // forward + 2x backward
}

}  // namespace trainsim
