#pragma once
// What is trained and how: the transformer's dimensions, the parallel
// strategy and the training settings. Filled from validated scenario JSON.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/moe_spec.hpp"
#include "models/stage_layout.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

// GeLU and ReLU MLPs run one elementwise activation kernel each way with the
// same bytes (read the input, write the output); SwiGLU has a gated up-projection.
enum class MlpKind : std::uint8_t { Gelu, SwiGlu, Relu };

// Kinds of transformer layer. A model has one kind per layer; every layer kind
// brings its own steps (models/layer_steps.hpp), parameters and activation
// memory. Dense: attention + MLP; Moe: attention + routed experts (models/moe.hpp).
enum class LayerKind : std::uint8_t { Dense, Moe };
inline constexpr std::size_t kNumLayerKinds = 2;
const char* to_string(LayerKind k);

struct TransformerSpec {
  std::string name;
  std::string family;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;  // = heads without grouped-query attention
  int ffn_hidden = 0;
  int vocab = 0;
  MlpKind mlp = MlpKind::Gelu;
  bool rmsnorm = false;  // RMSNorm (else LayerNorm)
  bool rope = false;     // rotary position embedding (else learned positions)
  bool alibi = false;    // ALiBi (Press et al., ICLR 2022): a per-head linear bias on the attention scores
  bool tied_embeddings = false;
  // Bias vectors on the linear layers (GPT-2/GPT-3, BLOOM, Megatron-LM's GPT): their
  // add and gradient kernels where the framework does not fuse them (models/layer_steps.cpp).
  bool bias = false;
  // The attention splits one fused QKV projection's output into Q, K and V tensors
  // (torch.split / chunk: llm-foundry's MPT), so autograd cats their gradients in the
  // backward; charged under the eager lists (docs/frameworks.md, "Fused QKV split").
  bool qkv_split = false;
  int max_seq_len = 0;
  int head_dim_override = 0;  // attention head size when it is not hidden / heads (Qwen3, gpt-oss)
  // Sliding-window attention (Mistral 7B: 4096): each query attends to the last
  // `sliding_window` keys, itself included; 0 = full causal attention.
  int sliding_window = 0;
  // Attention and MLP side by side on one normed input (GPT-J, GPT-NeoX, PaLM): one
  // fused input projection and one TP reduction per layer and pass (models/layer_steps.cpp).
  bool parallel_block = false;
  std::vector<LayerKind> layer_kinds;  // one per layer; empty = every layer dense
  MoeSpec moe;                         // routed experts of the Moe layers
  MlaSpec mla;                         // multi-head latent attention instead of (grouped-query) attention
  // Multi-token prediction modules (DeepSeek-V3 report, Section 2.2), run on
  // the last pipeline stage after the LM head; 0 = none.
  int mtp_depth = 0;
  std::string source;
  // A sub-model in front of this one (LLaVA-style vision or audio encoder; at
  // most one): its layers run first, on pipeline stages of their own
  // (parallel.stages), and its `encoder_tokens` outputs per sample, projected to
  // this model's hidden size, enter this model's first stage (docs/heterogeneous.md).
  std::vector<TransformerSpec> encoder;
  int encoder_tokens = 0;

  LayerKind layer_kind(int layer) const { return layer_kinds.empty() ? LayerKind::Dense : layer_kinds[layer]; }

  int head_dim() const { return head_dim_override > 0 ? head_dim_override : hidden / heads; }
  double params_per_layer() const;  // weights of one dense transformer layer
  double attention_params() const;  // attention and norms of one layer (no MLP)
  // Of one layer's attention and norms, what every TP rank holds whole: the layer norms and
  // the output projection's bias (Megatron-LM's RowParallelLinear adds it after the all-reduce).
  double replicated_attention_params() const;
  // What one TP rank holds of a dense layer: the split weights / tp plus the replicated ones
  // (norms, the row-parallel biases of the attention output and the MLP down projection).
  double params_per_layer_per_tp_rank(int tp) const;
  // Of those, the linear layers' weight matrices (no norms, no biases): what Transformer
  // Engine keeps in FP8 under FP8 parameters (TrainingSpec::fp8_params).
  double linear_weights_per_layer_per_tp_rank(int tp) const;
  double params_of_kind(LayerKind k) const;
  double embedding_params() const;  // token (+ learned position) embedding
  // What one TP rank holds of it: the word embedding is split over the vocabulary, a learned
  // position table is replicated (Megatron-LM's VocabParallelEmbedding beside a plain Embedding).
  double embedding_params_per_tp_rank(int tp) const;
  double total_params() const;
  // Weights of the multi-token prediction modules (projection, norms and one
  // block of the last layer's kind each; embedding and head are shared).
  double mtp_params() const;
};

// ZeroBubbleH1 / ZeroBubbleH2: the handcrafted schedules of Qi et al., "Zero
// Bubble (Almost) Pipeline Parallelism", ICLR 2024 (arXiv:2401.10241), with
// the backward split into B and W (models/schedule.hpp); ZeroBubble1p / 2p:
// its automatic schedules under a memory limit of p or 2p micro-batches'
// activations (models/zero_bubble.hpp). ZeroBubbleV / DualPipeV: two chunks
// per rank in a V (rank i holds chunks i and 2p-1-i; models/v_schedules.hpp).
// Seq1F1B: 1F1B over the sequence chunks of each micro-batch (Sun et al.,
// arXiv:2406.03488; ParallelSpec::seq_chunks, models/schedule.hpp).
enum class ScheduleKind : std::uint8_t {
  GPipe,
  OneFOneB,
  Interleaved1F1B,
  ZeroBubbleH1,
  ZeroBubbleH2,
  ZeroBubble1p,
  ZeroBubble2p,
  Custom,
  ZeroBubbleV,
  DualPipeV,
  Seq1F1B,
  BreadthFirst,        // looped chunks, every micro-batch through a chunk before the next (models/breadth_first.hpp)
  PipeDream,           // asynchronous 1F1B with weight stashing, no flush (models/pipedream.hpp)
  PipeDream2BW,        // asynchronous 1F1B with double-buffered weights, no flush (models/pipedream.hpp)
  DualPipe,            // two copies of the model fed from both ends (models/v_schedules.hpp)
  DeepSpeed1F1B,       // DeepSpeed's TrainSchedule, v0.8.3 on (models/deepspeed_schedule.hpp)
  DeepSpeed1F1BLegacy  // DeepSpeed's TrainSchedule before v0.8.3 (receive and send swapped)
};

// One unit of pipeline work on a rank: the forward, the whole backward (B and W
// in the layer's issue order), the backward-input or the backward-weight part
// of micro-batch `microbatch` through the rank's chunk `chunk` (its chunk-th
// virtual stage in layer order). `overlapped`: the unit runs interleaved with
// the rank's previous unit (of another micro-batch), so that the communication
// of one hides behind the computation of the other (DualPipe's F&B pair).
enum class UnitKind : std::uint8_t { Forward, Backward, BackwardInput, BackwardWeight };
struct ScheduleUnit {
  UnitKind kind = UnitKind::Forward;
  int microbatch = 0;
  int chunk = 0;
  bool overlapped = false;
  bool operator==(const ScheduleUnit&) const = default;
};

// A pipeline schedule (models/schedule.hpp): `chunk_stage[v]` is the pipeline
// rank of the model's v-th chunk (layer order); `units[s]` is rank s's order.
struct PipelineSchedule {
  std::string name;
  int stages = 1;
  int microbatches = 1;
  std::vector<int> chunk_stage;
  std::vector<std::vector<ScheduleUnit>> units;
  // Two copies of the model (DualPipe): chunks [0, route_chunks) are one copy,
  // [route_chunks, 2 route_chunks) the other, and every micro-batch index runs
  // through both, each an input of its own. 0: one route through every chunk.
  int route_chunks = 0;

  int chunks() const { return static_cast<int>(chunk_stage.size()); }
  // The chunk before / after v on a micro-batch's way (-1: v takes the input
  // data / computes the loss), and the part of the model (layer block) v holds.
  int prev_chunk(int v) const { return part_of(v) == 0 ? -1 : v - 1; }
  int next_chunk(int v) const {
    return v + 1 == chunks() || (route_chunks > 0 && (v + 1) % route_chunks == 0) ? -1 : v + 1;
  }
  int part_of(int v) const { return route_chunks > 0 ? v % route_chunks : v; }
  // Chunks on rank `stage`, and the model chunk (virtual stage) of its `chunk`-th one.
  int chunks_on(int stage) const;
  int virtual_stage(int stage, int chunk) const;
};
enum class Recompute : std::uint8_t { None, Selective, Full };
const char* to_string(ScheduleKind s);
// The schedules the Zero Bubble runtime runs: ZB-H1, ZB-H2, ZB-1p, ZB-2p and ZB-V.
bool is_zero_bubble_schedule(ScheduleKind s);
const char* to_string(Recompute r);

struct ParallelSpec {
  int tp = 1;  // tensor (Megatron) parallel size
  int pp = 1;  // pipeline stages
  int dp = 1;  // data-parallel replicas
  int cp = 1;  // context parallel (sequence split of attention)
  // How attention sees the sequence split over cp (docs/long-context.md): the
  // Ulysses degree, a divisor of cp. 1: ring (K and V of the whole sequence
  // gathered over the CP group); cp: DeepSpeed-Ulysses (all-to-all of Q, K, V
  // from sequence to heads and of the output back); between: hybrid (USP),
  // Ulysses groups of cp_ulysses consecutive CP ranks, rings across them.
  int cp_ulysses = 1;
  int ep = 1;   // expert parallel (MoE only): carved out of tp*cp*dp (models/moe.hpp)
  int etp = 0;  // expert tensor parallel (MoE only; 0 = tp, Megatron-Core's default)
  MoeDispatcher moe_dispatcher = MoeDispatcher::AllToAll;  // MoE token dispatcher (models/moe_spec.hpp)
  int vpp = 1;                                             // virtual stages per pipeline rank (interleaved 1F1B)
  int seq_chunks = 1;  // seq1f1b: sequence chunks per micro-batch, each a unit of the schedule
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int micro_batch = 1;             // sequences per micro-batch
  int global_batch = 1;            // sequences per iteration
  bool sequence_parallel = false;  // Megatron SP (norm/dropout split over TP)
  int zero = 0;                    // ZeRO stage 0..3 (3 = FSDP)
  Recompute recompute = Recompute::None;
  // Full recomputation: each TP rank keeps 1/tp of the checkpointed layer input and
  // all-gathers it before the recomputation (Megatron-LM --distribute-saved-activations,
  // Metaseq's distributed checkpoints for OPT).
  bool distribute_saved_activations = false;
  // Activation offload (Transformer Engine / Megatron-Core --cpu-offloading): the saved
  // activations of the first `offload_layers` layers of every model chunk go to host
  // memory after their forward and come back one layer ahead of their backward.
  int offload_layers = 0;
  bool dp_overlap = true;        // overlap gradient reduction with the last backward
  bool tp_comm_overlap = false;  // overlap TP collectives with the adjacent GEMMs (userbuffers)
  // Backward: the input-gradient TP all-reduce runs beside the weight-gradient GEMM
  // (Megatron-LM's async TP all-reduce, late 2021 on); false: after it, blocking (2021 code).
  // Sequence parallelism always overlaps (its reduce-scatter came with the async code).
  bool tp_grad_overlap = true;
  // ZeRO-3 / FSDP: when a backward layer's successor is gathered. true: as the
  // layer's backward starts (PyTorch FSDP's default BACKWARD_PRE); false: after
  // it (BACKWARD_POST, Composer's default), so each backward layer waits for its gather.
  bool backward_prefetch_pre = true;
  bool pp_overlap = true;  // pipeline send/recv beside compute (false: blocking, as Megatron-LM 2021 / DeepSpeed)
  // 1F1B and interleaved 1F1B: in the steady phase each backward runs overlapped
  // with the next forward (another micro-batch), so the all-to-all of one hides
  // behind the other's computation (Megatron-Core's --overlap-moe-expert-parallel-comm).
  bool moe_a2a_overlap = false;
  bool pp_scatter_gather =
      true;                    // each TP rank sends 1/tp of an activation (Megatron-LM); false: all of it (DeepSpeed)
  double dp_bucket_bytes = 0;  // gradient bucket size (0 = Megatron default: max(40M, 1M*dp) params)
  // Megatron-LM's --DDP-impl (framework megatron-legacy): false = its local DDP (all-reduce of
  // the .grad tensors), true = PyTorch's DistributedDataParallel, whose reducer copies each
  // gradient into its bucket and the reduced bucket back into .grad (docs/frameworks.md).
  bool torch_ddp = false;
  std::vector<int> stage_layers;     // transformer layers per pipeline stage (empty = even split; vpp must be 1)
  PipelineSchedule custom_schedule;  // schedule == Custom: units per stage (models/schedule.hpp)
  // Rank coordinates -> GPU (models/placement.hpp): an order of the dimensions,
  // innermost first (Megatron-LM: tp, cp, ep, dp, pp), or an explicit GPU per
  // rank in that order (empty = by the order).
  std::string placement_order = "tp-cp-ep-dp-pp";
  std::vector<int> placement_gpus;
  // Per-stage layouts (MPMD, models/mpmd.hpp): empty = every stage has tp and an even
  // (or stage_layers) share of the layers; else one entry per pipeline stage.
  std::vector<StageLayout> stages;
  // Uneven data-parallel shares of the batch (docs/heterogeneous.md, docs/faults.md):
  // micro-batches per replica (summing to global_batch / micro_batch); empty = an
  // even split. `dp_shares_balanced`: the planner sets them proportional to each
  // replica's speed (models/dp_shares.hpp).
  std::vector<int> dp_shares;
  bool dp_shares_balanced = false;
  int replica_micro_batches = 0;  // > 0: one replica's layout (models/dp_shares.hpp), its count
  // Uneven ring-CP sequence shares (docs/heterogeneous.md): tokens of each CP rank
  // (summing to seq_len); empty = seq_len/cp each. `cp_shares_auto`: the planner
  // sets them by each CP rank's speed. `cp_rank` >= 0: one CP rank's layout.
  std::vector<int> cp_shares;
  bool cp_shares_auto = false;
  int cp_rank = -1;
  // Uneven Ulysses head shares (docs/heterogeneous.md): query heads of a TP rank
  // each Ulysses rank attends to after the all-to-all (in Ulysses rank order,
  // summing to heads/tp); empty = heads/tp/cp_ulysses each. `head_shares_auto`:
  // the planner sets them so that every Ulysses rank computes as long.
  std::vector<int> head_shares;
  bool head_shares_auto = false;

  int cp_ring() const { return cp / cp_ulysses; }  // ranks of a CP ring (cp without Ulysses)
  bool uneven_shares() const { return dp_shares_balanced || !dp_shares.empty(); }
  bool uneven_cp() const { return cp_shares_auto || !cp_shares.empty(); }
  bool uneven_heads() const { return head_shares_auto || !head_shares.empty(); }
  // Uneven CP or head shares: each CP rank runs a program of its own (cp_rank set).
  bool per_cp_rank_programs() const { return uneven_cp() || uneven_heads(); }
  // Tokens of a sequence this rank holds: its CP share, else seq_len/cp.
  double cp_local_tokens(int seq_len) const {
    return cp_rank >= 0 && !cp_shares.empty() ? cp_shares[cp_rank] : static_cast<double>(seq_len) / cp;
  }
  int gpus() const { return tp * pp * dp * cp; }
  // Model chunks in layer order (pp * vpp, or the custom schedule's), the
  // layers of chunk v (stage_layers when it has one entry per chunk, else an
  // even split) and its first layer.
  int virtual_stages() const;
  int layers_of_virtual_stage(int v, int model_layers) const;
  int first_layer_of_virtual_stage(int v, int model_layers) const;
  int micro_batches() const {  // the product in 64 bits: the layout rules check it after first use
    if (replica_micro_batches > 0) return replica_micro_batches;
    return static_cast<int>(global_batch / (static_cast<std::int64_t>(micro_batch) * dp));
  }
};

// Flash: FlashAttention-2; FlashAttention3 and Cudnn (cuDNN fused attention, what
// Transformer Engine runs on Hopper/Blackwell): the same fused algorithm with their own
// profile curves; FlashTriton: the Triton FlashAttention kernel (flash_attn_triton, used
// e.g. by llm-foundry in 2023); Unfused: QK^T, softmax, dropout, AV kernels.
enum class AttentionKind : std::uint8_t { Flash, FlashTriton, Unfused, FlashAttention3, Cudnn };

// The training framework decides which elementwise, norm, cast and loss kernels a
// step runs (models/layer_steps.cpp, docs/frameworks.md). Default: the fused lists
// used before the key existed (Megatron-style), with FlashAttention-2.
// DeepSpeed: Megatron-DeepSpeed's kernels under DeepSpeed's engine (bf16
// optimizer: fp32 gradient accumulation per micro-batch, fp32 all-reduce).
// MegatronLegacy: Megatron-LM's model code before Megatron-Core (megatron/model/,
// 2020-2022): the same model kernels as DeepSpeed's lists (apex-style LayerNorm
// backward, torch.split's cat, autograd's residual sums, the fp32 loss), under
// Megatron-LM's own training loop.
enum class Framework : std::uint8_t { Default, MegatronTe, TorchCompile, Eager, Fsdp2, DeepSpeed, MegatronLegacy };

// Host time per kernel a framework spends before the CUDA launch (Python, the
// PyTorch dispatcher): eager PyTorch 3.34 us, the eager `torch.functional` call on
// CUDA tensors in PyTorch's operator micro-benchmark (github.com/pytorch/pytorch
// pull 32194: split_M8_N8_parts2_cuda, Forward Execution Time 3.340 us), a lower
// bound (no autograd record, no nn.Module hooks). Megatron-LM, FSDP and DeepSpeed
// issue their kernels from the same eager PyTorch. torch.compile's generated code
// calls the kernel launchers without the dispatcher: 0. Default: 0, the predictions
// from before the mechanism. docs/frameworks.md ("Host dispatch").
constexpr double kEagerDispatchSeconds = 3.34e-6;
constexpr double host_dispatch_seconds(Framework f) {
  return f == Framework::Default || f == Framework::TorchCompile ? 0.0 : kEagerDispatchSeconds;
}

// How FP8 GEMM inputs are scaled (Transformer Engine recipes, docs/frameworks.md
// "FP8 recipes"): the quantisation kernels in front of each FP8 GEMM differ.
// Delayed: DelayedScaling, per-tensor scale from an amax history, amax taken in the
// cast kernel; Current: Float8CurrentScaling, an amax pass before the cast;
// Mxfp8: MXFP8BlockScaling (Blackwell), 1x32 blocks with E8M0 scales; Blockwise:
// Float8BlockScaling (DeepSeek-V3 style), 1x128 tiles with fp32 scales.
enum class Fp8Recipe : std::uint8_t { Delayed, Current, Mxfp8, Blockwise };
const char* to_string(Fp8Recipe r);

// Which kernels run inside captured CUDA graphs (docs/frameworks.md "CUDA graphs"):
// None; Layers: every transformer layer's forward and backward (Transformer Engine's
// make_graphed_callables per layer, Megatron-Core --cuda-graph-impl transformer_engine);
// Full: the whole forward-backward (Megatron-Core's full-iteration graph), embedding
// and LM head included.
enum class CudaGraphScope : std::uint8_t { None, Layers, Full };

// With pipeline parallelism and tied input/output embeddings, when the first
// and last stage all-reduce the shared weight's gradient (docs/frameworks.md,
// "Tied embeddings"). AfterDp: after the DP gradient sync, before the optimizer
// (Megatron-LM's finalize_model_grads); BeforeDp: after the last backward,
// before the DP reduction (DeepSpeed's ReduceTiedGrads); Overlapped: issued once
// the rank's share is final, waited for before the step (the Zero Bubble
// runtime's ZB schedules); None: not run (the Zero Bubble fork's 1F1B and
// interleaved schedules as the paper ran them).
enum class TiedGradSync : std::uint8_t { AfterDp, BeforeDp, Overlapped, None };
// Where the weight gradients of a step's micro-batches are summed. Fused: inside the
// weight-gradient GEMM (Megatron-LM's gradient accumulation fusion since February
// 2022, Transformer Engine's fuse_wgrad_accumulation), or not at all per micro-batch
// (FSDP, DeepSpeed's own pass). Autograd: every micro-batch after the first adds its
// 16-bit gradient to the parameter's .grad in a kernel of its own (PyTorch
// AccumulateGrad, `variable_grad += new_grad`), as Megatron-LM's local DDP without
// contiguous buffers did before the fusion (docs/frameworks.md).
enum class GradAccumulation : std::uint8_t { Fused, Autograd };

struct TrainingSpec {
  int seq_len = 2048;
  Dtype precision = Dtype::BF16;   // GEMM dtype (fp8: GEMMs in FP8, the rest in BF16)
  std::string optimizer = "adam";  // adam | adam-unfused | sgd | lamb | adafactor | muon (docs/frameworks.md)
  // Adam's state in bf16 with no fp32 master copy (training.optimizer_dtype "bf16": NeMo's
  // distributed_fused_adam with optim.dtype bf16, docs/frameworks.md, "Optimizers").
  bool bf16_optimizer_state = false;
  AttentionKind attention = AttentionKind::Flash;
  int grad_reduce_bytes = 4;  // bytes per gradient element in DP reduction (Megatron-LM default: fp32)
  bool dropout = true;        // hidden/attention dropout (kernels and masks); off in Llama-style recipes
  RoutingSpec routing;        // MoE: how unevenly tokens reach the experts
  // The optimizer step's gradient-norm / inf-NaN check: an all-reduce that
  // holds every rank until the slowest is done (false), or the Zero Bubble
  // runtime's post-validation (true): each rank steps at once and its next
  // iteration overlaps the others' tail (docs/schedules.md).
  bool post_validation = false;
  // Where the Zero Bubble runtime posts a receive (models/schedule_timing.hpp,
  // receive_posts): before the pass during which its sender is predicted to
  // finish (false, the runtime from November 2023 on), or after it, among the
  // passes sorted by start time (true, its first commit; docs/schedules.md).
  bool zb_receives_sorted = false;
  TiedGradSync tied_grad_sync = TiedGradSync::AfterDp;
  Framework framework = Framework::Default;
  // Megatron-Core's cross_entropy_loss_fusion (read with Framework::MegatronTe only):
  // false runs the unfused vocab-parallel cross-entropy in fp32 (Megatron-Core's
  // default), true its torch.compile'd pieces (docs/frameworks.md, "Cross-entropy").
  bool cross_entropy_loss_fusion = false;
  // Megatron-LM's persistent LayerNorm (apex.contrib FastLayerNorm for the hidden sizes
  // it supports; read with Framework::MegatronLegacy only, docs/frameworks.md).
  bool persist_layer_norm = false;
  // Host time per kernel before its launch when the scenario measures it for its
  // own host (training.host_dispatch_us); absent: the framework's figure above.
  std::optional<double> host_seconds_per_kernel;
  // CUDA_LAUNCH_BLOCKING=1: every launch returns when its kernel has finished, so
  // the host's issue time adds to the GPU time instead of hiding behind it.
  bool launch_blocking = false;
  // PyTorch 1.13's FSDP copies each unit's flat gradient into a padded buffer before every
  // reduce-scatter (F.pad in _post_backward_hook, a clone when no padding is needed);
  // releases from 2.0 copy only when padding is needed (docs/frameworks.md).
  bool fsdp_pad_copy = false;
  // The loss as the fused softmax-cross-entropy CUDA kernel of flash-attention's
  // `xentropy_cuda_lib` (training.loss_kernel "xentropy"; read with the eager and fsdp2
  // lists): one kernel reading the 16-bit logits twice, its backward one reading them
  // and writing the gradient (docs/frameworks.md, "The loss and the training metrics").
  bool xentropy_loss = false;
  // Cross-entropies the trainer computes over each micro-batch's logits for its training
  // metrics, after the micro-batch's backward, without autograd, under autocast (Composer's
  // LanguageCrossEntropy and LanguagePerplexity: 2; docs/frameworks.md, same section).
  int metric_cross_entropies = 0;
  // NeMo's apex DistributedFusedAdam buckets (docs/frameworks.md, "NeMo's distributed
  // Adam"): one gradient / parameter bucket per transformer layer, and every parameter
  // outside the layers (embedding, LM head, final norm) in the first layer's bucket.
  bool apex_distributed_adam = false;
  Fp8Recipe fp8_recipe = Fp8Recipe::Delayed;  // precision fp8 only
  // Transformer Engine's primary weights in FP8 (fp8_model_init; NeMo's fp8_params): the
  // layers' linear weights are FP8 tensors with a cached transpose, so the step's first
  // forward transposes them instead of casting 16-bit copies, the distributed optimizer
  // casts its shard and all-gathers 1 B per element (docs/frameworks.md, "FP8 parameters").
  bool fp8_params = false;
  // Megatron-Core's defer_embedding_wgrad_compute: the last stage keeps each micro-batch's
  // output-layer input and logit gradient and runs the output layer's weight-gradient GEMMs
  // in the pipeline flush, after its last backward, for the first wgrad_deferral_limit
  // micro-batches (0: all of them; docs/frameworks.md, "Deferred output-layer weight gradients").
  bool defer_embedding_wgrad = false;
  int wgrad_deferral_limit = 0;
  CudaGraphScope cuda_graphs = CudaGraphScope::None;
  GradAccumulation grad_accumulation = GradAccumulation::Fused;
};

// Bytes of one activation element: FP32 training (`fp32`, and `tf32`, whose
// matmuls run on TF32 tensor cores from FP32 tensors) keeps activations, their
// gradients and the messages carrying them in 4 bytes; mixed precision in 2
// (FP8 recipes keep activations in 16-bit too).
// The host time per kernel the layers are issued with: the scenario's own
// figure, else the framework's (docs/frameworks.md, "Host dispatch").
inline double issue_host_seconds(const TrainingSpec& t) {
  return t.host_seconds_per_kernel.value_or(host_dispatch_seconds(t.framework));
}

constexpr double activation_element_bytes(const TrainingSpec& t) {
  return t.precision == Dtype::FP32 || t.precision == Dtype::TF32 ? 4.0 : 2.0;
}

}  // namespace trainsim
