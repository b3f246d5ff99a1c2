#pragma once
// Mixture-of-experts arithmetic shared by the planner, the memory model and the
// layout rules: which layers are MoE, how expert parallelism is carved out of
// the dense ranks (Megatron-Core's expert rank order etp-ep-edp over tp, cp, dp),
// and how many routed tokens each expert-parallel rank processes under skew
// and capacity limits (the busiest rank sets the pace of every all-to-all).
#include <vector>

#include "models/training_spec.hpp"

namespace trainsim {

// One kind per layer from the MoE settings (dense first layers, then every
// layer_freq-th MoE); empty when the model has no experts.
std::vector<LayerKind> moe_layer_kinds(const TransformerSpec& model);

// Expert tensor-parallel size (etp, or tp when unset).
int expert_tp(const ParallelSpec& par);
// Expert data-parallel size: tp*cp*dp / (ep*etp).
int expert_dp(const ParallelSpec& par);

// Coordinates of a dense rank (t, c, d) in the expert layout: the flat index
// y = t + tp*(c + cp*d) splits into etp (innermost), ep, then edp.
struct ExpertCoord {
  int etp = 0, ep = 0, edp = 0;
};
ExpertCoord expert_coord(const ParallelSpec& par, int t, int c, int d);
// The dense rank (t, c, d) of expert coordinates (inverse of expert_coord).
struct DenseCoord {
  int tp = 0, cp = 0, dp = 0;
};
DenseCoord dense_coord(const ParallelSpec& par, const ExpertCoord& e);

// Share of the routed tokens each expert receives (sums to 1), before
// capacity limits, for `ep` expert-parallel ranks holding experts in order.
std::vector<double> expert_shares(const MoeSpec& moe, const RoutingSpec& routing, int ep);

// Routed token copies of one micro-batch on one MoE layer between the EP
// ranks of one group (every group alike). Each EP rank's copies split over
// the experts by the shares (expected sampling), or are drawn from them per
// micro-batch (multinomial); each expert keeps at most capacity_factor times
// its even share of a rank's copies (Megatron-Core drops on the sending rank).
struct RoutingDraw {
  int ep = 1;
  std::vector<double> copies;    // copies[i * ep + j]: copies EP rank i sends to EP rank j's experts, after drops
  std::vector<double> received;  // per EP rank: the copies its experts compute
  double max_received = 0;       // the busiest rank's
  double offered = 0;            // copies routed in the group before drops
  double kept = 0;               // after drops
};
// One draw (expected sampling) or one per micro-batch of a replica
// (multinomial, seeded by training.routing.seed).
std::vector<RoutingDraw> routing_draws(const TransformerSpec& model, const ParallelSpec& par,
                                       const TrainingSpec& train);

// Bytes of one dispatch between the EP ranks of a group, bytes[i * ep + j]
// from EP rank i to EP rank j (the combine moves the transpose); a rank's
// traffic to itself is on the diagonal and moves nothing. alltoall: every
// routed copy. deepep: one copy per token and distinct destination node, sent
// to the EP rank of the sender's local index on that node (node-limited to
// max_nodes_per_token), then one per token and distinct destination GPU
// forwarded inside the node; ep_node[x] is the node of EP rank x.
std::vector<double> dispatch_bytes(const TransformerSpec& model, const ParallelSpec& par, const RoutingDraw& draw,
                                   double tokens_in, const std::vector<int>& ep_node, double token_bytes);

// Routed token copies of one micro-batch on one MoE layer.
struct RoutedTokens {
  double tokens_in = 0;             // tokens entering the MoE block on a rank (after the SP split)
  std::vector<double> rank_tokens;  // token copies each EP rank receives for its experts, after drops (mean over draws)
  double max_rank_tokens = 0;       // the busiest rank's in the busiest draw (it sets the pace)
  double balanced_rank_tokens = 0;  // without skew or drops: tokens_in * top_k
  double dropped_fraction = 0;      // of all routed copies, dropped by the capacity factor
};
// Over all draws of the run, or over the given ones.
RoutedTokens routed_tokens(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train);
RoutedTokens routed_tokens(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                           const std::vector<RoutingDraw>& draws);

// Parameters of one MoE layer on one rank: the part replicated over dp*cp
// (attention, norms, router; shared experts split by tp) and the routed
// experts held by this rank (experts/ep of them, split by etp).
struct MoeLayerParams {
  double dense = 0;
  double expert = 0;
};
MoeLayerParams moe_layer_params_per_rank(const TransformerSpec& model, const ParallelSpec& par);

}  // namespace trainsim
