#include "models/training_spec.hpp"

namespace trainsim {

namespace {
// A layer's two norms: weight and bias each for LayerNorm, a weight each for RMSNorm.
double norm_params(const TransformerSpec& m) { return (m.rmsnorm ? 2.0 : 4.0) * m.hidden; }
}  // namespace

double TransformerSpec::params_per_layer() const {
  if (mla.enabled()) return attention_params() + (mlp == MlpKind::SwiGlu ? 3.0 : 2.0) * hidden * ffn_hidden;
  const double h = hidden, d = head_dim();
  const double attn = h * (heads * d) + 2.0 * h * (kv_heads * d) + (heads * d) * h;  // Q, K, V, output
  const double mlp_weights = (mlp == MlpKind::SwiGlu ? 3.0 : 2.0) * h * ffn_hidden;
  const double biases = bias ? (heads + 2.0 * kv_heads) * d + h + ffn_hidden + h : 0.0;  // GPT has biases
  return attn + mlp_weights + norm_params(*this) + biases;
}

double TransformerSpec::replicated_attention_params() const {
  if (mla.enabled()) return 2.0 * hidden + mla.q_lora_rank + mla.kv_lora_rank;  // the norms, latent ones too
  return norm_params(*this) + (bias ? hidden : 0.0);  // the output projection's bias is added after the TP reduce
}

double TransformerSpec::params_per_layer_per_tp_rank(int tp) const {
  // The MLP's down projection (row-parallel) adds its bias after the reduce, as the attention's does.
  if (tp == 1) return params_per_layer();  // exact: no subtraction and addition back
  const double replicated = replicated_attention_params() + (bias && !mla.enabled() ? hidden : 0.0);
  return (params_per_layer() - replicated) / tp + replicated;
}

double TransformerSpec::linear_weights_per_layer_per_tp_rank(int tp) const {
  const double h = hidden, d = head_dim();
  const double biases = bias && !mla.enabled() ? (heads + 2.0 * kv_heads) * d + h + ffn_hidden + h : 0.0;
  const double norms = mla.enabled() ? replicated_attention_params() : norm_params(*this);
  return (params_per_layer() - norms - biases) / tp;
}

double TransformerSpec::attention_params() const {
  if (mla.enabled()) {
    // DeepSeek-V2 (arXiv:2405.04434) Section 2.1: W_DQ, W_UQ (or W_Q), W_DKV and the
    // shared rotary key W_KR, W_UK and W_UV, W_O; RMSNorms on both latents and the two layer norms.
    const double h = hidden, a = heads, qk = mla.qk_nope_dim + mla.qk_rope_dim;
    const double q = mla.q_lora_rank > 0 ? h * mla.q_lora_rank + mla.q_lora_rank * a * qk : h * a * qk;
    const double kv = h * (mla.kv_lora_rank + mla.qk_rope_dim) +
                      static_cast<double>(mla.kv_lora_rank) * a * (mla.qk_nope_dim + mla.v_head_dim);
    return q + kv + a * mla.v_head_dim * h + mla.q_lora_rank + mla.kv_lora_rank + 2.0 * h;
  }
  const double h = hidden, d = head_dim();
  const double attn = h * (heads * d) + 2.0 * h * (kv_heads * d) + (heads * d) * h;
  const double biases = bias ? (heads + 2.0 * kv_heads) * d + h : 0.0;
  return attn + norm_params(*this) + biases;
}

double TransformerSpec::mtp_params() const {
  const double h = hidden;
  return mtp_depth * (2 * h * h + 2 * h + params_of_kind(layer_kind(layers - 1)));
}

double TransformerSpec::params_of_kind(LayerKind k) const {
  switch (k) {
    case LayerKind::Dense:
      return params_per_layer();
    case LayerKind::Moe: {
      // Router, routed and shared experts (models/moe.hpp), no biases in the experts.
      const double mult = mlp == MlpKind::SwiGlu ? 3.0 : 2.0;
      return attention_params() + static_cast<double>(hidden) * moe.experts +
             mult * hidden *
                 (static_cast<double>(moe.experts) * moe.expert_ffn +
                  static_cast<double>(moe.shared_experts) * moe.shared_ffn);
    }
  }
  return params_per_layer();
}

const char* to_string(LayerKind k) {
  switch (k) {
    case LayerKind::Dense:
      return "dense";
    case LayerKind::Moe:
      return "moe";
  }
  return "?";
}

double TransformerSpec::embedding_params() const { return embedding_params_per_tp_rank(1); }

double TransformerSpec::embedding_params_per_tp_rank(int tp) const {
  return static_cast<double>(vocab) * hidden / tp + (rope || alibi ? 0.0 : static_cast<double>(max_seq_len) * hidden);
}

double TransformerSpec::total_params() const {
  const double head = tied_embeddings ? 0.0 : static_cast<double>(vocab) * hidden;
  double body = 0;
  for (int l = 0; l < layers; ++l) body += params_of_kind(layer_kind(l));
  return body + embedding_params() + head + hidden;
}

int ParallelSpec::virtual_stages() const {
  if (schedule == ScheduleKind::Custom) return custom_schedule.chunks();
  if (schedule == ScheduleKind::DualPipe) return pp;  // each copy of the model in pp parts
  if (schedule == ScheduleKind::ZeroBubbleV || schedule == ScheduleKind::DualPipeV) return 2 * pp;
  return pp * vpp;
}

int ParallelSpec::layers_of_virtual_stage(int v, int model_layers) const {
  const int n = virtual_stages();
  if (static_cast<int>(stage_layers.size()) == n) return stage_layers[v];
  return model_layers / n;
}

int ParallelSpec::first_layer_of_virtual_stage(int v, int model_layers) const {
  if (static_cast<int>(stage_layers.size()) != virtual_stages()) return v * (model_layers / virtual_stages());
  int first = 0;
  for (int i = 0; i < v; ++i) first += stage_layers[i];
  return first;
}

bool is_zero_bubble_schedule(ScheduleKind s) {
  return s == ScheduleKind::ZeroBubbleH1 || s == ScheduleKind::ZeroBubbleH2 || s == ScheduleKind::ZeroBubble1p ||
         s == ScheduleKind::ZeroBubble2p || s == ScheduleKind::ZeroBubbleV;
}

const char* to_string(ScheduleKind s) {
  switch (s) {
    case ScheduleKind::GPipe:
      return "gpipe";
    case ScheduleKind::OneFOneB:
      return "1f1b";
    case ScheduleKind::Interleaved1F1B:
      return "interleaved-1f1b";
    case ScheduleKind::ZeroBubbleH1:
      return "zb-h1";
    case ScheduleKind::ZeroBubbleH2:
      return "zb-h2";
    case ScheduleKind::ZeroBubble1p:
      return "zb-1p";
    case ScheduleKind::ZeroBubble2p:
      return "zb-2p";
    case ScheduleKind::Custom:
      return "custom";
    case ScheduleKind::ZeroBubbleV:
      return "zb-v";
    case ScheduleKind::DualPipeV:
      return "dualpipe-v";
    case ScheduleKind::Seq1F1B:
      return "seq1f1b";
    case ScheduleKind::BreadthFirst:
      return "breadth-first";
    case ScheduleKind::PipeDream:
      return "pipedream";
    case ScheduleKind::PipeDream2BW:
      return "pipedream-2bw";
    case ScheduleKind::DualPipe:
      return "dualpipe";
    case ScheduleKind::DeepSpeed1F1B:
      return "deepspeed-1f1b";
    case ScheduleKind::DeepSpeed1F1BLegacy:
      return "deepspeed-1f1b-legacy";
  }
  return "?";
}

int PipelineSchedule::chunks_on(int stage) const {
  int n = 0;
  for (int s : chunk_stage) n += s == stage ? 1 : 0;
  return n;
}

int PipelineSchedule::virtual_stage(int stage, int chunk) const {
  for (int v = 0; v < chunks(); ++v) {
    if (chunk_stage[v] == stage && chunk-- == 0) return v;
  }
  return -1;
}

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  return "?";
}

const char* to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::Delayed:
      return "delayed";
    case Fp8Recipe::Current:
      return "current";
    case Fp8Recipe::Mxfp8:
      return "mxfp8";
    case Fp8Recipe::Blockwise:
      return "blockwise";
  }
  return "?";
}

}  // namespace trainsim
