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
    case MoeDispatcher::DeepEP:
      return "deepep";
  }
  return "?";
}

const char* to_string(RoutingSampling s) { return s == RoutingSampling::Multinomial ? "multinomial" : "expected"; }

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

namespace {

double tokens_entering(const ParallelSpec& p, const TrainingSpec& tr) {
  const double tokens = static_cast<double>(p.micro_batch) * tr.seq_len / p.cp;
  return p.sequence_parallel && p.tp > 1 ? tokens / p.tp : tokens;
}

// A standard normal deviate from two 53-bit uniforms of the (fully specified)
// 64-bit Mersenne Twister, by the Box-Muller transform.
double normal_deviate(std::mt19937_64& rng) {
  constexpr double kUnit = 1.0 / 9007199254740992.0;  // 2^-53
  const double u1 = (static_cast<double>(rng() >> 11) + 1) * kUnit;
  const double u2 = static_cast<double>(rng() >> 11) * kUnit;
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * 3.14159265358979323846 * u2);
}

// `copies` whole copies split over experts from `share`: a multinomial draw as
// a chain of binomials (expert e takes from what the earlier ones left, with
// its share of the remaining probability), each by its normal approximation
// rounded and clamped.
std::vector<double> multinomial_counts(double copies, const std::vector<double>& share, std::mt19937_64& rng) {
  std::vector<double> out(share.size(), 0.0);
  double left = std::round(copies), mass = 1;
  for (std::size_t e = 0; e + 1 < share.size() && left > 0; ++e) {
    const double q = mass > 0 ? std::clamp(share[e] / mass, 0.0, 1.0) : 0.0;
    const double z = normal_deviate(rng);
    const double x = std::clamp(std::round(left * q + std::sqrt(left * q * (1 - q)) * z), 0.0, left);
    out[e] = x;
    left -= x;
    mass -= share[e];
  }
  if (!share.empty()) out.back() += left;
  return out;
}

}  // namespace

std::vector<RoutingDraw> routing_draws(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  const int ep = p.ep, experts = m.moe.experts, local = experts / ep;
  const double copies = tokens_entering(p, tr) * m.moe.top_k;  // routed by one EP rank
  const std::vector<double> share = expert_shares(m.moe, tr.routing, ep);
  // One expert keeps at most capacity_factor times its even share of a rank's copies.
  const double capacity = m.moe.capacity_factor > 0 ? m.moe.capacity_factor * copies / experts : copies;
  const bool sampled = tr.routing.sampling == RoutingSampling::Multinomial;
  const int draws = sampled ? std::max(1, p.micro_batches()) : 1;
  std::mt19937_64 rng(tr.routing.seed);
  std::vector<RoutingDraw> out(static_cast<std::size_t>(draws));
  for (RoutingDraw& d : out) {
    d.ep = ep;
    d.copies.assign(static_cast<std::size_t>(ep) * ep, 0.0);
    d.received.assign(static_cast<std::size_t>(ep), 0.0);
    for (int i = 0; i < ep; ++i) {
      std::vector<double> offered(share.size());
      if (sampled) {
        offered = multinomial_counts(copies, share, rng);
      } else {
        for (int e = 0; e < experts; ++e) offered[e] = copies * share[e];
      }
      for (int e = 0; e < experts; ++e) {
        const double kept = std::min(offered[e], capacity);
        d.copies[static_cast<std::size_t>(i) * ep + e / local] += kept;
        d.received[e / local] += kept;
        d.offered += offered[e];
        d.kept += kept;
      }
    }
    d.max_received = *std::max_element(d.received.begin(), d.received.end());
  }
  return out;
}

std::vector<double> dispatch_bytes(const TransformerSpec& m, const ParallelSpec& p, const RoutingDraw& d,
                                   double tokens_in, const std::vector<int>& ep_node, double token_bytes) {
  const int ep = d.ep;
  const auto at = [ep](int i, int j) { return static_cast<std::size_t>(i) * ep + j; };
  std::vector<double> bytes(static_cast<std::size_t>(ep) * ep, 0.0);
  if (p.moe_dispatcher != MoeDispatcher::DeepEP) {
    for (std::size_t x = 0; x < bytes.size(); ++x) bytes[x] = d.copies[x] * token_bytes;
    return bytes;
  }
  // Nodes of the group and the EP ranks on each, in rank order.
  std::vector<int> node = ep_node;
  if (static_cast<int>(node.size()) != ep) node.assign(static_cast<std::size_t>(ep), 0);
  std::vector<int> nodes = node;
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::vector<std::vector<int>> ranks_on(nodes.size());
  std::vector<int> node_index(static_cast<std::size_t>(ep)), local_index(static_cast<std::size_t>(ep));
  for (int x = 0; x < ep; ++x) {
    const auto n = static_cast<std::size_t>(std::lower_bound(nodes.begin(), nodes.end(), node[x]) - nodes.begin());
    node_index[x] = static_cast<int>(n);
    local_index[x] = static_cast<int>(ranks_on[n].size());
    ranks_on[n].push_back(x);
  }
  const double k = m.moe.top_k;
  // A token whose copies go to a destination with probability q reaches it
  // 1 - (1 - q)^k times on average (k picks, with replacement).
  const auto reached = [k](double q) { return 1 - std::pow(1 - std::clamp(q, 0.0, 1.0), k); };
  for (int i = 0; i < ep; ++i) {
    double total = 0;
    for (int j = 0; j < ep; ++j) total += d.copies[at(i, j)];
    if (!(total > 0)) continue;
    std::vector<double> node_tokens(nodes.size(), 0.0);
    double distinct = 0;
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      double q = 0;
      for (int j : ranks_on[n]) q += d.copies[at(i, j)] / total;
      node_tokens[n] = tokens_in * reached(q);
      distinct += reached(q);
    }
    // Node-limited routing: a token reaches at most max_nodes_per_token nodes.
    const int limit = m.moe.max_nodes_per_token;
    const double scale = limit > 0 && distinct > limit ? limit / distinct : 1.0;
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const bool own = static_cast<int>(n) == node_index[i];
      const int peer = own ? i : ranks_on[n][local_index[i] % static_cast<int>(ranks_on[n].size())];
      if (!own) bytes[at(i, peer)] += node_tokens[n] * scale * token_bytes;  // over the network, once per node
      for (int j : ranks_on[n]) {
        // Forwarded (or, on the own node, sent) over NVLink to each distinct GPU.
        if (j != peer) bytes[at(peer, j)] += tokens_in * reached(d.copies[at(i, j)] / total) * scale * token_bytes;
      }
    }
  }
  return bytes;
}

RoutedTokens routed_tokens(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr) {
  return routed_tokens(m, p, tr, routing_draws(m, p, tr));
}

RoutedTokens routed_tokens(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& tr,
                           const std::vector<RoutingDraw>& draws) {
  RoutedTokens out;
  out.tokens_in = tokens_entering(p, tr);
  out.balanced_rank_tokens = out.tokens_in * m.moe.top_k;
  out.rank_tokens.assign(static_cast<std::size_t>(p.ep), 0.0);
  double offered = 0, kept = 0;
  for (const RoutingDraw& d : draws) {
    for (int j = 0; j < p.ep; ++j) out.rank_tokens[j] += d.received[j] / static_cast<double>(draws.size());
    out.max_rank_tokens = std::max(out.max_rank_tokens, d.max_received);
    offered += d.offered;
    kept += d.kept;
  }
  out.dropped_fraction = offered > 0 ? 1.0 - kept / offered : 0.0;
  return out;
}

MoeLayerParams moe_layer_params_per_rank(const TransformerSpec& m, const ParallelSpec& p) {
  const double mult = m.mlp == MlpKind::SwiGlu ? 3.0 : 2.0;
  const double h = m.hidden;
  MoeLayerParams out;
  // Norms (and an output bias) whole on every TP rank; at TP 1 nothing to set apart (exact).
  const double replicated = p.tp == 1 ? 0.0 : m.replicated_attention_params();
  out.dense = (m.attention_params() - replicated + mult * h * m.moe.shared_experts * m.moe.shared_ffn) / p.tp +
              replicated + h * m.moe.experts;  // the router is replicated over TP
  out.expert = mult * h * m.moe.expert_ffn * (static_cast<double>(m.moe.experts) / p.ep) / expert_tp(p);
  return out;
}

}  // namespace trainsim
