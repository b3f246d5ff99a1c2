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

// Routed token copies of one micro-batch on one MoE layer.
struct RoutedTokens {
  double tokens_in = 0;             // tokens entering the MoE block on a rank (after the SP split)
  std::vector<double> rank_tokens;  // token copies each EP rank receives for its experts, after drops
  double max_rank_tokens = 0;       // the busiest rank's (it sets the pace)
  double balanced_rank_tokens = 0;  // without skew or drops: tokens_in * top_k
  double dropped_fraction = 0;      // of all routed copies, dropped by the capacity factor
};
RoutedTokens routed_tokens(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train);

// Parameters of one MoE layer on one rank: the part replicated over dp*cp
// (attention, norms, router; shared experts split by tp) and the routed
// experts held by this rank (experts/ep of them, split by etp).
struct MoeLayerParams {
  double dense = 0;
  double expert = 0;
};
MoeLayerParams moe_layer_params_per_rank(const TransformerSpec& model, const ParallelSpec& par);

}  // namespace trainsim
