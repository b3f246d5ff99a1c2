#include "sim/network.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace trainsim {

AnalyticalNetwork::AnalyticalNetwork(const Cluster& cluster, const std::vector<CalibrationProfile>& profiles)
    : cluster_(&cluster), profiles_(&profiles) {}

CommShape AnalyticalNetwork::shape(const std::vector<int>& members) const {
  CommShape s;
  s.size = static_cast<int>(members.size());
  std::map<int, int> per_node;
  s.scaleup_bw = s.network_bw = s.nvls_bw = std::numeric_limits<double>::max();
  bool all_nvls = true;
  for (int gpu : members) {
    ++per_node[cluster_->node_of(gpu)];
    const NodeSpec& node = cluster_->node_spec_of_gpu(gpu);
    const CalibrationProfile& p = (*profiles_)[cluster_->gpu_type_of(gpu)];
    const double eff_bw = node.scaleup_bandwidth * p.scaleup.busbw_efficiency.value;
    if (eff_bw < s.scaleup_bw) {
      s.scaleup_link_bw = node.scaleup_bandwidth;
      s.scaleup_curve = p.scaleup.busbw_curve.curve.empty() ? nullptr : &p.scaleup.busbw_curve.curve;
      s.nvls_curve = p.scaleup.nvls_busbw_curve.curve.empty() ? nullptr : &p.scaleup.nvls_busbw_curve.curve;
    }
    s.scaleup_bw = std::min(s.scaleup_bw, eff_bw);
    const double nvls_eff = p.scaleup.nvls_busbw_efficiency.value;
    if (!node.nvls || nvls_eff <= 0) all_nvls = false;
    s.nvls_bw = std::min(s.nvls_bw, node.scaleup_bandwidth * nvls_eff);
    s.network_bw = std::min(s.network_bw, node.nic_bandwidth_per_gpu() * p.network.busbw_efficiency.value);
    s.scaleup_latency = std::max(s.scaleup_latency, p.scaleup.latency.value);
    s.network_latency = std::max(s.network_latency, p.network.latency.value);
    s.base_latency = std::max(s.base_latency, p.scaleup.base_latency.value);
  }
  if (!all_nvls) s.nvls_bw = 0;
  s.nodes = static_cast<int>(per_node.size());
  for (const auto& [node, count] : per_node) s.max_per_node = std::max(s.max_per_node, count);
  return s;
}

double ring_factor(CollectiveKind kind, int n) {
  const double f = static_cast<double>(n - 1) / n;
  switch (kind) {
    case CollectiveKind::AllReduce:
      return 2 * f;
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter:
    case CollectiveKind::AllToAll:
      return f;
    case CollectiveKind::Broadcast:
      return 1;
  }
  return 2 * f;
}

int ring_steps(CollectiveKind kind, int n) { return kind == CollectiveKind::AllReduce ? 2 * (n - 1) : n - 1; }

double AnalyticalNetwork::collective_seconds(const CommShape& s, CollectiveKind kind, double bytes) const {
  if (s.size <= 1 || bytes <= 0) return 0.0;
  const int n = s.size;
  // Bus bandwidth per rank: within a node the scale-up links; across nodes the
  // node's NICs used by the k members on it (NCCL spreads channels over NICs).
  double busbw;
  double hop_latency;
  if (s.nodes == 1) {
    busbw = s.scaleup_bw;
    hop_latency = s.scaleup_latency;
  } else {
    const double net = s.network_bw * s.max_per_node;
    busbw = s.max_per_node > 1 ? std::min(s.scaleup_bw, net) : net;
    hop_latency = s.network_latency;
  }
  if (kind == CollectiveKind::AllToAll && s.nodes > 1) {
    // All-to-all cannot aggregate several NICs: each GPU sends the off-node
    // share of its buffer through its own NIC.
    const double off_node = static_cast<double>(n - s.max_per_node) / n;
    const double t_net = bytes * off_node / s.network_bw;
    const double t_local = bytes * (s.max_per_node - 1.0) / n / s.scaleup_bw;
    return s.base_latency + (n - 1) * hop_latency + std::max(t_net, t_local);
  }
  // Ring: bandwidth-optimal, latency linear in n. Inside one node a measured
  // bus-bandwidth curve (which already contains latency) replaces alpha-beta.
  double ring = s.base_latency + ring_steps(kind, n) * hop_latency + ring_factor(kind, n) * bytes / busbw;
  if (s.nodes == 1 && s.scaleup_curve != nullptr) {
    ring = ring_factor(kind, n) * bytes / (s.scaleup_link_bw * s.scaleup_curve->at(bytes));
  }
  double best = ring;
  if (kind == CollectiveKind::AllReduce) {
    // NVLS: in-switch reduction within one NVLink domain.
    if (s.nodes == 1 && s.nvls_bw > 0) {
      const double nvls = s.nvls_curve != nullptr
                              ? ring_factor(kind, n) * bytes / (s.scaleup_link_bw * s.nvls_curve->at(bytes))
                              : s.base_latency + 2 * s.scaleup_latency + ring_factor(kind, n) * bytes / s.nvls_bw;
      best = std::min(best, nvls);
    }
    // Double binary tree across nodes: same bandwidth term, latency in log2(nodes).
    if (s.nodes > 1) {
      const double depth = std::ceil(std::log2(static_cast<double>(s.nodes)));
      const double intra = s.max_per_node > 1 ? 2 * (s.max_per_node - 1) * s.scaleup_latency : 0.0;
      const double tree = s.base_latency + 2 * depth * hop_latency + intra + ring_factor(kind, n) * bytes / busbw;
      best = std::min(best, tree);
    }
  }
  return best;
}

double AnalyticalNetwork::p2p_seconds(const CommShape& s, double bytes) const {
  const bool same_node = s.nodes == 1;
  const double bw = same_node ? s.scaleup_bw : s.network_bw;
  const double lat = s.base_latency + (same_node ? s.scaleup_latency : s.network_latency);
  return lat + bytes / bw;
}

}  // namespace trainsim
