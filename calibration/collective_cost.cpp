#include "calibration/collective_cost.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace trainsim {

const char* to_string(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::Auto:
      return "auto";
    case CollectiveAlgorithm::Ring:
      return "ring";
    case CollectiveAlgorithm::Tree:
      return "tree";
    case CollectiveAlgorithm::Hierarchical:
      return "hierarchical";
    case CollectiveAlgorithm::Nvls:
      return "nvls";
    case CollectiveAlgorithm::Pairwise:
      return "pairwise";
    case CollectiveAlgorithm::PointToPoint:
      return "p2p";
    case CollectiveAlgorithm::DatacenterHierarchical:
      return "datacenter-hierarchical";
  }
  return "?";
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

double bus_factor(const char* op, int n) {
  if (std::strcmp(op, "all_reduce") == 0) return ring_factor(CollectiveKind::AllReduce, n);
  if (std::strcmp(op, "sendrecv") == 0) return 1.0;
  return ring_factor(CollectiveKind::AllGather, n);
}

int hop_steps(const char* op, int n) {
  if (std::strcmp(op, "all_reduce") == 0) return ring_steps(CollectiveKind::AllReduce, n);
  if (std::strcmp(op, "sendrecv") == 0) return 1;
  return ring_steps(CollectiveKind::AllGather, n);
}

namespace {

// Bus bandwidth of a ring between domains: the members of a domain use their
// NICs (one channel each, like NCCL's rail-aligned rings), never faster than
// the scale-up links that chain them inside the domain.
double network_busbw(const CommShape& s) {
  const double net = s.network_bw * s.max_per_node;
  return s.max_per_node > 1 ? std::min(s.scaleup_bw, net) : net;
}

double ring_seconds(const CommShape& s, CollectiveKind kind, double bytes) {
  const int n = s.size;
  // Inside one domain a measured bus-bandwidth curve (which already contains
  // latency) replaces alpha-beta.
  if (s.nodes == 1 && s.scaleup_curve != nullptr) {
    return ring_factor(kind, n) * bytes / (s.scaleup_link_bw * s.scaleup_curve->at(bytes));
  }
  const bool local = s.nodes == 1;
  const double busbw = local ? s.scaleup_bw : network_busbw(s);
  const double hop = local ? s.scaleup_latency : s.network_latency;
  return s.base_latency + ring_steps(kind, n) * hop + ring_factor(kind, n) * bytes / busbw;
}

double nvls_seconds(const CommShape& s, double bytes) {
  const double f = ring_factor(CollectiveKind::AllReduce, s.size);
  if (s.nvls_curve != nullptr) return f * bytes / (s.scaleup_link_bw * s.nvls_curve->at(bytes));
  return s.base_latency + 2 * s.scaleup_latency + f * bytes / s.nvls_bw;
}

// Double binary tree over domains, ring reduce-scatter / all-gather inside
// each; `bandwidth_factor` < 1 is the tuner's derating, 1 the cost charged.
double tree_seconds(const CommShape& s, double bytes, double bandwidth_factor) {
  const double depth = std::ceil(std::log2(static_cast<double>(s.nodes)));
  const double intra = s.max_per_node > 1 ? 2 * (s.max_per_node - 1) * s.scaleup_latency : 0.0;
  return s.base_latency + 2 * depth * s.network_latency + intra +
         ring_factor(CollectiveKind::AllReduce, s.size) * bytes / (network_busbw(s) * bandwidth_factor);
}

// Intra-domain ring reduce-scatter, ring all-reduce of the 1/k shard among the
// members of equal local rank across domains, intra-domain all-gather, one
// after the other (launched once).
double hierarchical_seconds(const CommShape& s, double bytes) {
  const int k = s.max_per_node, m = s.nodes;
  const double intra = k > 1 ? (k - 1) * s.scaleup_latency + (k - 1.0) / k * bytes / s.scaleup_bw : 0.0;
  const double inter = ring_steps(CollectiveKind::AllReduce, m) * s.network_latency +
                       ring_factor(CollectiveKind::AllReduce, m) * bytes / k / s.network_bw;
  return s.base_latency + 2 * intra + inter;
}

// Pairwise all-to-all: each GPU sends the off-domain share of its buffer
// through its own NIC (all-to-all cannot aggregate several NICs) and, across
// datacenters, the off-datacenter share over its share of the WAN.
double all_to_all_seconds(const CommShape& s, double bytes) {
  const int n = s.size;
  if (s.nodes == 1) return ring_seconds(s, CollectiveKind::AllToAll, bytes);
  const double off_node = static_cast<double>(n - s.max_per_node) / n;
  double t = std::max(bytes * off_node / s.network_bw, bytes * (s.max_per_node - 1.0) / n / s.scaleup_bw);
  double hop = s.network_latency;
  if (s.datacenters > 1) {
    const int local = s.per_dc_size > 0 ? s.per_dc_size : n / s.datacenters;
    t = std::max(t, bytes * static_cast<double>(n - local) / n / s.wan_bw);
    hop = s.wan_latency;
  }
  return s.base_latency + (n - 1) * hop + t;
}

// The part of a communicator inside one datacenter.
CommShape within_datacenter(const CommShape& s) {
  CommShape d = s;
  d.size = s.per_dc_size;
  d.nodes = s.per_dc_nodes;
  d.datacenters = 1;
  d.per_dc_size = d.size;
  d.per_dc_nodes = d.nodes;
  return d;
}

// Inside every datacenter, then among the members of equal index across the
// datacenters (a ring over them, on their share of the WAN), then inside again.
double datacenter_hierarchical_seconds(const CommShape& s, CollectiveKind kind, double bytes) {
  const CommShape d = within_datacenter(s);
  const int dcs = s.datacenters;
  const double shard = bytes / s.per_dc_size;
  auto across = [&](CollectiveKind k) {
    return s.base_latency + ring_steps(k, dcs) * s.wan_latency + ring_factor(k, dcs) * shard / s.wan_bw;
  };
  auto inside = [&](CollectiveKind k) { return d.size > 1 ? ring_seconds(d, k, bytes) : 0.0; };
  switch (kind) {
    case CollectiveKind::AllReduce:
      return inside(CollectiveKind::ReduceScatter) + across(CollectiveKind::AllReduce) +
             inside(CollectiveKind::AllGather);
    case CollectiveKind::AllGather:
      return across(CollectiveKind::AllGather) + inside(CollectiveKind::AllGather);
    case CollectiveKind::ReduceScatter:
      return inside(CollectiveKind::ReduceScatter) + across(CollectiveKind::ReduceScatter);
    case CollectiveKind::AllToAll:
    case CollectiveKind::Broadcast:
      break;
  }
  return -1;
}

// A flat ring over datacenters (broadcast, or uneven datacenters): every step
// pays the WAN's latency and the channels crossing it share the WAN.
double flat_ring_across_datacenters(const CommShape& s, CollectiveKind kind, double bytes) {
  const double busbw = std::min(network_busbw(s), s.wan_bw * s.max_per_node);
  return s.base_latency + ring_steps(kind, s.size) * s.wan_latency + ring_factor(kind, s.size) * bytes / busbw;
}

bool datacenter_hierarchical_applies(const CommShape& s, CollectiveKind kind) {
  return s.datacenters > 1 && s.per_dc_size > 0 &&
         (kind == CollectiveKind::AllReduce || kind == CollectiveKind::AllGather ||
          kind == CollectiveKind::ReduceScatter);
}

}  // namespace

double algorithm_seconds(const CommShape& s, CollectiveKind kind, CollectiveAlgorithm algorithm, double bytes) {
  if (s.size <= 1 || !(bytes > 0)) return 0.0;
  switch (algorithm) {
    case CollectiveAlgorithm::Ring:
      return s.datacenters > 1 ? flat_ring_across_datacenters(s, kind, bytes) : ring_seconds(s, kind, bytes);
    case CollectiveAlgorithm::Nvls:
      return kind == CollectiveKind::AllReduce && s.nodes == 1 && s.nvls_bw > 0 ? nvls_seconds(s, bytes) : -1;
    case CollectiveAlgorithm::Tree:
      return kind == CollectiveKind::AllReduce && s.nodes > 1 && s.uniform_per_node && s.datacenters == 1
                 ? tree_seconds(s, bytes, 1.0)
                 : -1;
    case CollectiveAlgorithm::Pairwise:
      return kind == CollectiveKind::AllToAll ? all_to_all_seconds(s, bytes) : -1;
    case CollectiveAlgorithm::DatacenterHierarchical:
      return datacenter_hierarchical_applies(s, kind) ? datacenter_hierarchical_seconds(s, kind, bytes) : -1;
    case CollectiveAlgorithm::Hierarchical:  // never chosen automatically (NCCL does not either)
      return kind == CollectiveKind::AllReduce && s.nodes > 1 && s.uniform_per_node && s.datacenters == 1
                 ? hierarchical_seconds(s, bytes)
                 : -1;
    case CollectiveAlgorithm::PointToPoint:
    case CollectiveAlgorithm::Auto:
      break;
  }
  return -1;
}

AlgorithmCost choose_algorithm(const CommShape& s, CollectiveKind kind, double bytes, double tree_bandwidth_factor) {
  if (s.size <= 1 || !(bytes > 0)) return {CollectiveAlgorithm::Ring, 0.0};
  if (kind == CollectiveKind::AllToAll) {
    return {CollectiveAlgorithm::Pairwise, all_to_all_seconds(s, bytes)};
  }
  if (datacenter_hierarchical_applies(s, kind)) {
    return {CollectiveAlgorithm::DatacenterHierarchical, datacenter_hierarchical_seconds(s, kind, bytes)};
  }
  AlgorithmCost best{CollectiveAlgorithm::Ring, algorithm_seconds(s, kind, CollectiveAlgorithm::Ring, bytes)};
  if (kind != CollectiveKind::AllReduce) return best;
  double best_key = best.seconds;
  const double nvls = algorithm_seconds(s, kind, CollectiveAlgorithm::Nvls, bytes);
  if (nvls >= 0 && nvls < best_key) {
    best = {CollectiveAlgorithm::Nvls, nvls};
    best_key = nvls;
  }
  if (algorithm_seconds(s, kind, CollectiveAlgorithm::Tree, bytes) >= 0) {
    const double key = tree_seconds(s, bytes, tree_bandwidth_factor);
    if (key < best_key) best = {CollectiveAlgorithm::Tree, tree_seconds(s, bytes, 1.0)};
  }
  return best;
}

double all_to_all_v_seconds(const CommShape& s, const AllToAllVLoad& load) {
  const int n = s.size;
  if (n <= 1 || !(load.scaleup > 0 || load.network > 0 || load.wan > 0)) return 0.0;
  // Inside one domain: the uniform buffer that loads a member as much (n-1 of
  // its n shares leave it), on the scale-up ring's terms (its measured curve).
  if (s.nodes == 1) return ring_seconds(s, CollectiveKind::AllToAll, load.scaleup * n / (n - 1.0));
  double t = std::max(load.network / s.network_bw, s.scaleup_bw > 0 ? load.scaleup / s.scaleup_bw : 0.0);
  double hop = s.network_latency;
  if (s.datacenters > 1) {
    t = std::max(t, load.wan / s.wan_bw);
    hop = s.wan_latency;
  }
  return s.base_latency + (n - 1) * hop + t;
}

double p2p_seconds(const CommShape& s, double bytes) {
  // A measured send/recv curve contains the latency, as a busbw curve does.
  if (s.nodes == 1 && s.p2p_curve != nullptr) return bytes / (s.scaleup_link_bw * s.p2p_curve->at(bytes));
  if (s.nodes == 1) return s.base_latency + s.scaleup_latency + bytes / s.scaleup_bw;
  if (s.datacenters > 1) return s.base_latency + s.wan_latency + bytes / s.wan_bw;
  return s.base_latency + s.network_latency + bytes / s.network_bw;
}

}  // namespace trainsim
