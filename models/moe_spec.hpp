#pragma once
// Mixture-of-experts settings of a transformer (which layers route tokens to
// experts, how many, how large) and of a run (how unevenly the router spreads
// tokens). Filled from validated scenario JSON; docs/moe.md lists every key.
#include <cstdint>
#include <vector>

namespace trainsim {

// Router scoring: softmax over experts (Mixtral, Qwen, DBRX, OLMoE) or sigmoid
// with a load-balancing bias (DeepSeek-V3's auxiliary-loss-free balancing).
enum class RouterKind : std::uint8_t { Softmax, SigmoidBias };
const char* to_string(RouterKind r);

struct MoeSpec {
  int experts = 0;         // routed experts per MoE layer (0 = a dense model)
  int top_k = 1;           // experts each token is routed to
  int expert_ffn = 0;      // FFN hidden size of one routed expert
  int shared_experts = 0;  // experts every token passes through (DeepSeek, Qwen2)
  int shared_ffn = 0;      // FFN hidden size of one shared expert
  int dense_layers = 0;    // the first layers are dense (DeepSeek-V3: 3)
  int layer_freq = 1;      // after them every layer_freq-th layer is MoE, the others dense
  RouterKind router = RouterKind::Softmax;
  // Tokens one expert takes per micro-batch, as a multiple of its even share
  // (tokens * top_k / experts); tokens beyond are dropped. 0 = dropless.
  double capacity_factor = 0;
  // Node-limited routing (DeepSeek-V3 report, Section 3.2.2: at most M = 4
  // nodes per token): a token's experts lie on at most this many nodes; 0 = any.
  int max_nodes_per_token = 0;

  bool enabled() const { return experts > 0; }
  bool is_moe_layer(int layer) const {
    return enabled() && layer >= dense_layers && (layer - dense_layers) % layer_freq == 0;
  }
};

// Multi-head latent attention (DeepSeek-V2/V3): queries through an optional
// low-rank bottleneck, keys and values up-projected per head from a shared
// compressed latent plus a decoupled rotary key. kv_lora_rank 0 = off.
struct MlaSpec {
  int q_lora_rank = 0;  // 0: queries projected directly from the hidden state
  int kv_lora_rank = 0;
  int qk_nope_dim = 0;  // per-head query/key size without rotary embedding
  int qk_rope_dim = 0;  // per-head rotary part (the key's is shared by all heads)
  int v_head_dim = 0;

  bool enabled() const { return kv_lora_rank > 0; }
};

// Token dispatchers: AllToAll sends each routed copy to its expert's rank
// (Megatron-Core alltoall); AllGather gathers every EP rank's tokens on every
// rank and reduce-scatters the outputs back (allgather), traffic independent of
// routing; DeepEP sends a token once to every distinct destination node (to the
// GPU of the sender's local index there) and forwards it over NVLink to each
// distinct destination GPU of that node (DeepEP's internode kernels).
enum class MoeDispatcher : std::uint8_t { AllToAll, AllGather, DeepEP };
const char* to_string(MoeDispatcher d);

// How the router spreads tokens over experts. Uniform: evenly. Zipf: expert
// of popularity rank r gets a share proportional to 1 / r^exponent, the ranks
// dealt to experts by a seeded shuffle. Histogram: measured relative loads per
// expert. Imbalance: the busiest expert-parallel rank receives `imbalance`
// times the mean, the others share the rest evenly.
enum class RoutingDistribution : std::uint8_t { Uniform, Zipf, Histogram, Imbalance };
const char* to_string(RoutingDistribution d);

// Expected: every EP rank's tokens split over the experts exactly by the
// shares, the same in every micro-batch. Multinomial: each EP rank's routed
// copies of each micro-batch are drawn from the shares (seeded), so token
// counts differ between ranks and micro-batches.
enum class RoutingSampling : std::uint8_t { Expected, Multinomial };
const char* to_string(RoutingSampling s);

struct RoutingSpec {
  RoutingDistribution distribution = RoutingDistribution::Uniform;
  RoutingSampling sampling = RoutingSampling::Expected;
  double zipf_exponent = 0;
  std::vector<double> histogram;  // one relative load per expert
  double imbalance = 1;           // busiest rank / mean, 1 .. ep
  std::uint64_t seed = 0;
};

}  // namespace trainsim
