#include "models/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace trainsim {

const char* to_string(RouterKind r) {
  switch (r) {
    case RouterKind::Softmax:
      return "softmax";
    case RouterKind::SigmoidBias:
      return "sigmoid-bias";
  }
  return "?";
}

const char* to_string(MoeDispatcher d) {
  switch (d) {
    case MoeDispatcher::AllToAll:
      return "alltoall";
    case MoeDispatcher::AllGather:
      return "allgather";
  }
  return "?";
}

const char* to_string(RoutingDistribution d) {
  switch (d) {
    case RoutingDistribution::Uniform:
      return "uniform";
    case RoutingDistribution::Zipf:
      return "zipf";
    case RoutingDistribution::Histogram:
      return "histogram";
    case RoutingDistribution::Imbalance:
      return "imbalance";
  }
  return "?";
}

std::vector<LayerKind> moe_layer_kinds(const TransformerSpec& m) {
  if (!m.moe.enabled()) return {};
  std::vector<LayerKind> kinds(static_cast<std::size_t>(m.layers), LayerKind::Dense);
  for (int l = 0; l < m.layers; ++l) {
    if (m.moe.is_moe_layer(l)) kinds[l] = LayerKind::Moe;
  }
  return kinds;
}

int expert_tp(const ParallelSpec& p) { return p.etp > 0 ? p.etp : p.tp; }

int expert_dp(const ParallelSpec& p) { return p.tp * p.cp * p.dp / (p.ep * expert_tp(p)); }

ExpertCoord expert_coord(const ParallelSpec& p, int t, int c, int d) {
  const int y = t + p.tp * (c + p.cp * d);
  const int etp = expert_tp(p);
  return ExpertCoord{y % etp, (y / etp) % p.ep, y / (etp * p.ep)};
}

DenseCoord dense_coord(const ParallelSpec& p, const ExpertCoord& e) {
  const int y = e.etp + expert_tp(p) * (e.ep + p.ep * e.edp);
  return DenseCoord{y % p.tp, (y / p.tp) % p.cp, y / (p.tp * p.cp)};
}

std::vector<double> expert_shares(const MoeSpec& moe, const RoutingSpec& r, int ep) {
  const int n = moe.experts;
  std::vector<double> w(static_cast<std::size_t>(n), 1.0);
  switch (r.distribution) {
    case RoutingDistribution::Uniform:
      break;
    case RoutingDistribution::Zipf: {
      // Popularity rank k gets 1 / (k+1)^s; ranks dealt to experts by a
      // Fisher-Yates shuffle on the (fully specified) 64-bit Mersenne Twister.
      std::vector<int> rank(static_cast<std::size_t>(n));
      std::iota(rank.begin(), rank.end(), 0);
      std::mt19937_64 rng(r.seed);
      for (int i = n - 1; i > 0; --i) std::swap(rank[i], rank[rng() % static_cast<std::uint64_t>(i + 1)]);
      for (int e = 0; e < n; ++e) w[e] = 1.0 / std::pow(rank[e] + 1.0, r.zipf_exponent);
      break;
    }
    case RoutingDistribution::Histogram:
      w = r.histogram;
      break;
    case RoutingDistribution::Imbalance: {
      // Rank 0 gets `imbalance` times the mean, the other ranks the rest evenly.
      const int local = n / ep;
      for (int e = 0; e < n; ++e) w[e] = e < local ? r.imbalance : (ep > 1 ? (ep - r.imbalance) / (ep - 1) : 1.0);
      break;
    }
  }
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) x /= sum;
  return w;
}

RoutedTokens routed_tokens(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  RoutedTokens out;
  const double tokens = static_cast<double>(p.micro_batch) * tr.seq_len / p.cp;
  out.tokens_in = p.sequence_parallel && p.tp > 1 ? tokens / p.tp : tokens;
  out.balanced_rank_tokens = out.tokens_in * m.moe.top_k;
  const std::vector<double> share = expert_shares(m.moe, tr.routing, p.ep);
  // Copies routed inside one EP group per micro-batch, and one expert's capacity.
  const double group = out.balanced_rank_tokens * p.ep;
  const double capacity = m.moe.capacity_factor > 0 ? m.moe.capacity_factor * group / m.moe.experts : group;
  const int local = m.moe.experts / p.ep;
  out.rank_tokens.assign(static_cast<std::size_t>(p.ep), 0.0);
  double kept = 0;
  for (int e = 0; e < m.moe.experts; ++e) {
    const double t = std::min(group * share[e], capacity);
    out.rank_tokens[e / local] += t;
    kept += t;
  }
  out.max_rank_tokens = *std::max_element(out.rank_tokens.begin(), out.rank_tokens.end());
  out.dropped_fraction = group > 0 ? 1.0 - kept / group : 0.0;
  return out;
}

MoeLayerParams moe_layer_params_per_rank(const TransformerSpec& m, const ParallelSpec& p) {
  const double mult = m.mlp == MlpKind::SwiGlu ? 3.0 : 2.0;
  const double h = m.hidden;
  MoeLayerParams out;
  out.dense = (m.attention_params() + mult * h * m.moe.shared_experts * m.moe.shared_ffn) / p.tp +
              h * m.moe.experts;  // the router is replicated over TP
  out.expert = mult * h * m.moe.expert_ffn * (static_cast<double>(m.moe.experts) / p.ep) / expert_tp(p);
  return out;
}

}  // namespace trainsim
