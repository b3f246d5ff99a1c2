#pragma once
// Communicators (groups of GPUs) and the analytical network model: alpha-beta
// per hierarchy level (scale-up domain, scale-out network, WAN) with calibrated
// bus-bandwidth efficiency and per-step latency. The facts of the platform
// (scale-up kind, NICs, leaf uplinks, datacenters) become a CommShape; the
// algorithm choice and cost formulas live in calibration/collective_cost.
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "calibration/collective_cost.hpp"
#include "calibration/profile.hpp"
#include "sim/program.hpp"
#include "sim/time.hpp"
#include "topologies/graph.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

struct Communicator {
  std::string name;          // e.g. "tp[stage 0, replica 3]"
  std::vector<int> members;  // global GPU ids, in rank order
  // How many members are simulated (the rest are provably equivalent to a
  // simulated one and arrive at the same time); rendezvous waits for these.
  int simulated_members = 0;
};

// What the analytical model cannot represent of a cluster (contention between
// communicators on oversubscribed uplinks or the WAN), one sentence each, for
// the caller to print; empty when it represents everything.
std::vector<std::string> analytical_limitations(const Cluster& cluster);

class AnalyticalNetwork {
 public:
  // profiles[t] is the calibration profile of the cluster's GPU type t.
  AnalyticalNetwork(const Cluster& cluster, const std::vector<CalibrationProfile>& profiles);

  CommShape shape(const std::vector<int>& members) const;
  // Time of one collective of `bytes` (NCCL buffer convention) on a communicator.
  double collective_seconds(const CommShape& shape, CollectiveKind kind, double bytes) const;
  // Time of an all-to-all-v on `members` (whose shape is `shape`): bytes[i*n+j]
  // is what member i sends to member j; each member's traffic is split by
  // link class (scale-up domain, network, WAN) by where its peers sit.
  double all_to_all_v_seconds(const CommShape& shape, const std::vector<int>& members,
                              std::span<const double> bytes) const;
  // Time of one point-to-point transfer between the two members of `shape`.
  double p2p_seconds(const CommShape& shape, double bytes) const;
  // A shift of GPU ids under which shape() does not change: shape(m + k * period)
  // == shape(m) for every k and members m whose shifted ids stay in the cluster
  // (whole leaves of identical nodes move onto identical leaves); 0 when no such
  // shift is known (several node kinds, GPU types or datacenters, leaves with
  // different uplinks, degraded links). Lets a caller time one of many shifted groups.
  int shift_period() const;
  // Whether shape() reads of a member its node only, not which GPU of the node
  // it is: under shift_period()'s conditions with scale-up links in the nodes,
  // a member's rail reaches the shape only through its leaf's uplinks (all
  // equal). Members on the same nodes, in order, then have the same shape.
  bool shape_reads_nodes_only() const;
  // The leaf group of a node (FabricFacts::leaf_group_of). Under
  // shape_reads_nodes_only() a shape reads of its members only which share a
  // node and which share a leaf group: members mapped member by member by a
  // one-to-one map of nodes that maps leaf groups one to one have the same shape.
  int leaf_group_of_node(int node) const { return fabric_.leaf_group_of(node); }
  // analytical_limitations(cluster).
  std::vector<std::string> warnings() const { return analytical_limitations(*cluster_); }
  // A link of the cluster graph (both directions) at `factor` of its capacity
  // for the whole iteration: every communicator using it is timed as if its
  // slowest channel crossed it (the analytical model has no routes). Applying
  // the same link twice keeps the smaller factor.
  void degrade_link(const TopologyVertex& a, const TopologyVertex& b, LinkKind kind, double factor);

 private:
  const Cluster* cluster_;
  const std::vector<CalibrationProfile>* profiles_;
  FabricFacts fabric_;
  std::vector<int> gpus_in_datacenter_;
  // NIC index of `gpu` in its node (GPU l uses NIC l * nics / gpus_per_node,
  // as in the cluster graph), -1 without NICs: computed, not a per-GPU table.
  int rail_of(int gpu) const;
  std::vector<int> first_gpu_of_node_;
  // uplink_capacity() of every leaf, computed once: [(datacenter * leaf_groups_ + group) * leaf_rails_ + rail],
  // rail 0 on a fat-tree. Empty without spines.
  std::vector<double> leaf_uplink_;
  int leaf_groups_ = 0, leaf_rails_ = 1;
  bool uniform_uplinks_ = true;  // every entry of leaf_uplink_ equal
  // Degraded links (degrade_link): capacity factors per GPU (its scale-up link,
  // its NIC path), per leaf uplink (indexed like leaf_uplink_) and per
  // datacenter (its WAN path); empty while nothing is degraded.
  std::vector<double> scaleup_factor_, nic_factor_, uplink_factor_, wan_factor_;
  CommShape compute_shape(const std::vector<int>& members) const;
  // Shapes of member lists of kMemoMembers or more taken so far: a
  // data-parallel group of thousands at scale is shaped by the planner's
  // timing signatures and again by the analytical model, each time a pass
  // over every member. Cleared when a link is degraded; guarded for callers
  // that share one network between threads.
  static constexpr std::size_t kMemoMembers = 256;
  mutable std::mutex memo_mutex_;
  mutable std::vector<std::pair<std::vector<int>, CommShape>> memo_;
};

}  // namespace trainsim
