#include <doctest/doctest.h>

#include "sim/network.hpp"
#include "sim/platform.hpp"
#include "sim_fixtures.hpp"

using namespace trainsim;
using namespace trainsim::testing;

TEST_CASE("ring all-reduce inside one node = 2(n-1)/n * S/B + 2(n-1) * alpha") {
  const Cluster cluster(toy_cluster(1, 8));
  const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 0)};
  const AnalyticalNetwork net(cluster, profiles);
  const CommShape s = net.shape({0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(s.nodes == 1);
  CHECK(s.max_per_node == 8);
  const double bytes = 1e9;
  // 2*7/8 * 1e9 B / 100e9 B/s = 17.5 ms; 14 steps * 2 us = 28 us.
  CHECK(net.collective_seconds(s, CollectiveKind::AllReduce, bytes) == doctest::Approx(17.5e-3 + 28e-6).epsilon(0.01));
  // All-gather: (n-1)/n * S/B + (n-1) alpha = 8.75 ms + 14 us.
  CHECK(net.collective_seconds(s, CollectiveKind::AllGather, bytes) == doctest::Approx(8.75e-3 + 14e-6).epsilon(0.01));
}

TEST_CASE("a data-parallel group with one GPU per node runs at one NIC's bandwidth") {
  ClusterSpec spec = toy_cluster(4, 8);
  spec.fabric.link_latency = 0;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  const AnalyticalNetwork net(cluster, profiles);
  const CommShape s = net.shape({0, 8, 16, 24});
  CHECK(s.nodes == 4);
  CHECK(s.max_per_node == 1);
  // 2*3/4 * 1 GB / 10 GB/s = 150 ms.
  CHECK(net.collective_seconds(s, CollectiveKind::AllReduce, 1e9) == doctest::Approx(0.150).epsilon(1e-6));
  // Eight GPUs per node in the group share the node's eight NICs: 8x faster than
  // one NIC, but never faster than the scale-up links.
  std::vector<int> all;
  for (int i = 0; i < 32; ++i) all.push_back(i);
  const CommShape w = net.shape(all);
  CHECK(w.max_per_node == 8);
  // busbw = min(100 GB/s NVLink, 8 * 10 GB/s) = 80 GB/s; 2*31/32 * 1 GB / 80 GB/s.
  CHECK(net.collective_seconds(w, CollectiveKind::AllReduce, 1e9) == doctest::Approx(2.0 * 31 / 32 / 80).epsilon(1e-6));
}

TEST_CASE("all-to-all across nodes cannot aggregate NICs") {
  ClusterSpec spec = toy_cluster(2, 8);
  spec.fabric.link_latency = 0;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  const AnalyticalNetwork net(cluster, profiles);
  std::vector<int> all;
  for (int i = 0; i < 16; ++i) all.push_back(i);
  const CommShape s = net.shape(all);
  // Half of each GPU's 1 GB buffer leaves the node through its own 10 GB/s NIC: 50 ms.
  CHECK(net.collective_seconds(s, CollectiveKind::AllToAll, 1e9) == doctest::Approx(0.05).epsilon(1e-6));
}

TEST_CASE("point-to-point inside and across nodes") {
  ClusterSpec spec = toy_cluster(2, 8);
  spec.fabric.link_latency = 0;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(1e-6, 5e-6)};
  const AnalyticalNetwork net(cluster, profiles);
  CHECK(net.p2p_seconds(net.shape({0, 1}), 1e8) == doctest::Approx(6e-6 + 1e-3));
  CHECK(net.p2p_seconds(net.shape({0, 8}), 1e8) == doctest::Approx(6e-6 + 1e-2));
}

TEST_CASE("each network step pays the fabric links it crosses: one leaf, or a spine between leaves") {
  ClusterSpec spec = toy_cluster(4, 8);
  spec.fabric.link_latency = 1e-6;
  spec.fabric.nodes_per_leaf = 2;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 5e-6)};
  const AnalyticalNetwork net(cluster, profiles);
  // Nodes 0 and 1 share their leaves: NIC-leaf-NIC, 2 links of 1 us.
  CHECK(net.shape({0, 8}).network_latency == doctest::Approx(2e-6 + 2e-6));
  CHECK(net.p2p_seconds(net.shape({0, 8}), 1e8) == doctest::Approx(5e-6 + 4e-6 + 1e-2));
  // Nodes 0 and 2 sit under different leaves: NIC-leaf-spine-leaf-NIC, 4 links.
  CHECK(net.shape({0, 16}).network_latency == doctest::Approx(2e-6 + 4e-6));
  CHECK(net.warnings().empty());
}

TEST_CASE("oversubscribed uplinks: a channel crossing leaves gets one uplink's capacity, and a warning") {
  // Fat-tree, 2 nodes of 8 GPUs (8 NICs) per leaf: 16 down ports of 10 GB/s,
  // 2:1 oversubscribed over 4 spines = 20 GB/s per leaf-spine link.
  ClusterSpec spec = toy_cluster(4, 8);
  spec.fabric.kind = FabricKind::FatTree;
  spec.fabric.nodes_per_leaf = 2;
  spec.fabric.spines = 4;
  spec.fabric.oversubscription = 2;
  spec.fabric.link_latency = 0;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  const AnalyticalNetwork net(cluster, profiles);
  // One GPU per node under one leaf: the NIC's 10 GB/s, 2*1/2 * 1 GB / 10 GB/s.
  CHECK(net.collective_seconds(net.shape({0, 8}), CollectiveKind::AllReduce, 1e9) == doctest::Approx(0.1));
  // Across leaves one channel alone still gets min(10, 20) GB/s.
  CHECK(net.collective_seconds(net.shape({0, 16}), CollectiveKind::AllReduce, 1e9) == doctest::Approx(0.1));
  // Eight channels per node leave the node's leaf, spread by ECMP over its 4
  // uplinks of 20 GB/s: 4 x 20 / 8 = 10 GB/s each, as the NICs.
  std::vector<int> two_leaves{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  CHECK(net.shape(two_leaves).network_bw == doctest::Approx(10e9));
  // With one spine: 8 channels share one 80 GB/s uplink, 10 GB/s each; with
  // 4:1 oversubscription 40 GB/s, 5 GB/s each.
  spec.fabric.spines = 1;
  spec.fabric.oversubscription = 4;
  const Cluster one_spine(spec);
  const AnalyticalNetwork net1(one_spine, profiles);
  CHECK(net1.shape(two_leaves).network_bw == doctest::Approx(5e9));
  CHECK(net1.shape({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}).network_bw == doctest::Approx(10e9));
  REQUIRE(net1.warnings().size() == 1);
  CHECK(net1.warnings()[0].find("oversubscription 4:1") != std::string::npos);
}

TEST_CASE("scale-up kind none: the GPUs of a node talk through their NICs") {
  ClusterSpec spec = toy_cluster(1, 4);
  spec.groups[0].node.scaleup = ScaleupKind::None;
  spec.fabric.link_latency = 0;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(0, 0)};
  const AnalyticalNetwork net(cluster, profiles);
  const CommShape s = net.shape({0, 1, 2, 3});
  CHECK(s.nodes == 4);  // every GPU is its own scale-up domain
  CHECK(s.max_per_node == 1);
  // 2*3/4 * 1 GB over the 10 GB/s NIC (not the 100 GB/s the node would have with NVLink).
  CHECK(net.collective_seconds(s, CollectiveKind::AllReduce, 1e9) == doctest::Approx(0.15));
  CHECK(net.p2p_seconds(net.shape({0, 1}), 1e9) == doctest::Approx(0.1));
}

namespace {
// Every field of two analytical shapes equal.
bool same(const CommShape& x, const CommShape& y) {
  return x.size == y.size && x.nodes == y.nodes && x.max_per_node == y.max_per_node &&
         x.uniform_per_node == y.uniform_per_node && x.scaleup_bw == y.scaleup_bw && x.nvls_bw == y.nvls_bw &&
         x.network_bw == y.network_bw && x.scaleup_latency == y.scaleup_latency &&
         x.network_latency == y.network_latency && x.base_latency == y.base_latency &&
         x.scaleup_link_bw == y.scaleup_link_bw && x.datacenters == y.datacenters && x.per_dc_size == y.per_dc_size &&
         x.per_dc_nodes == y.per_dc_nodes && x.wan_bw == y.wan_bw && x.wan_latency == y.wan_latency;
}
// 8 nodes of 8 GPUs on a two-level fabric of `kind`, `nodes_per_leaf` nodes under each leaf.
ClusterSpec leaf_fabric(FabricKind kind, int nodes_per_leaf) {
  ClusterSpec spec = toy_cluster(8, 8);
  spec.fabric.kind = kind;
  spec.fabric.link_latency = 1e-6;
  spec.fabric.nodes_per_leaf = nodes_per_leaf;
  spec.fabric.spines = 2;
  spec.fabric.oversubscription = 4;
  return spec;
}
}  // namespace

TEST_CASE("with scale-up links in one node kind, members on the same nodes have one shape whatever their rails") {
  const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 5e-6)};
  for (const FabricKind kind : {FabricKind::FatTree, FabricKind::RailOptimized}) {
    const Cluster cluster(leaf_fabric(kind, 2));
    const AnalyticalNetwork net(cluster, profiles);
    REQUIRE(net.shape_reads_nodes_only());
    // A pipeline link's pairs (node 0 to node 2, another leaf) on every rail,
    // half-node groups, and a group over three nodes with its GPUs moved to other rails.
    for (int rail = 1; rail < 8; ++rail) CHECK(same(net.shape({rail, 16 + rail}), net.shape({0, 16})));
    CHECK(same(net.shape({4, 5, 6, 7}), net.shape({0, 1, 2, 3})));
    CHECK(same(net.shape({7, 15, 23, 22}), net.shape({0, 9, 17, 18})));
    // Another node pattern (both under one leaf) is another shape.
    CHECK_FALSE(same(net.shape({0, 8}), net.shape({0, 16})));
  }
  // Without scale-up links each GPU is its own domain and its rail decides which leaf it meets the others under.
  ClusterSpec bare = toy_cluster(8, 8);
  bare.groups[0].node.scaleup = ScaleupKind::None;
  const Cluster bare_cluster(bare);
  CHECK_FALSE(AnalyticalNetwork(bare_cluster, profiles).shape_reads_nodes_only());
  ClusterSpec slowed = toy_cluster(8, 8);
  slowed.slowdowns.push_back(GpuSlowdown{3, 2.0, {}});
  const Cluster slowed_cluster(slowed);
  CHECK_FALSE(AnalyticalNetwork(slowed_cluster, profiles).shape_reads_nodes_only());  // two GPU types
}

TEST_CASE("with shapes that read nodes only, a one-to-one map of nodes and of leaf groups keeps every shape") {
  // The planner's replica images (models/planner.cpp): members moved to other
  // nodes, member by member, by a map that is one to one on nodes and on leaf
  // groups have the same shape; a map that joins two leaf groups does not.
  const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 5e-6)};
  for (const FabricKind kind : {FabricKind::FatTree, FabricKind::RailOptimized}) {
    const Cluster cluster(leaf_fabric(kind, 4));  // 8 nodes of 8 GPUs; with 4 per leaf: leaf groups {0-3}, {4-7}
    const AnalyticalNetwork net(cluster, profiles);
    REQUIRE(net.shape_reads_nodes_only());
    CHECK(net.leaf_group_of_node(3) == 0);
    CHECK(net.leaf_group_of_node(4) == 1);
    // Nodes 0 -> 3 and 5 -> 6 (leaf groups kept), nodes 1 -> 6 and 4 -> 2
    // (leaf groups swapped): within and across leaves, as pipeline links
    // of a replica on another node of each stage's leaf.
    CHECK(same(net.shape({3, 51}), net.shape({0, 40})));
    CHECK(same(net.shape({50, 17}), net.shape({10, 33})));
    CHECK(same(net.shape({24, 25, 26, 27}), net.shape({0, 1, 2, 3})));
    CHECK(same(net.shape({24, 25, 48, 49}), net.shape({0, 1, 40, 41})));
    // Nodes 0 and 4 (two leaf groups) onto nodes 0 and 1 (one): not one to one on leaf groups.
    CHECK_FALSE(same(net.shape({0, 32}), net.shape({0, 8})));
  }
}

TEST_CASE("across datacenters: inside each first, then the WAN at its per-GPU share, then inside again") {
  // 2 datacenters x 2 nodes x 2 GPUs; 12.5 GB/s of WAN shared by the 4 GPUs of
  // a datacenter: 3.125 GB/s each; WAN latency 10 ms, fabric links 1 us.
  ClusterSpec spec = toy_cluster(4, 2);
  spec.datacenters.count = 2;
  spec.datacenters.wan_bandwidth = 12.5e9;
  spec.datacenters.wan_latency = 10e-3;
  spec.fabric.link_latency = 1e-6;
  const Cluster cluster(spec);
  const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 0)};
  const AnalyticalNetwork net(cluster, profiles);
  const CommShape s = net.shape({0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(s.datacenters == 2);
  CHECK(s.per_dc_size == 4);
  CHECK(s.per_dc_nodes == 2);
  CHECK(s.wan_bw == doctest::Approx(3.125e9));
  // One WAN step: 2 us hop + 6 fabric links of 1 us + 10 ms.
  CHECK(s.wan_latency == doctest::Approx(10e-3 + 8e-6));
  // Reduce-scatter in each datacenter: ring of 4 over 2 nodes, 2 channels of
  // 10 GB/s = 20 GB/s: 3/4 GB / 20 GB/s + 3 steps of (2 us + 2 links).
  const double inside = 0.75 / 20 + 3 * 4e-6;
  // All-reduce of the 250 MB shard between the 2 datacenters: 2*1/2 * 0.25 GB
  // / 3.125 GB/s + 2 WAN steps.
  const double across = 0.25 / 3.125 + 2 * (10e-3 + 8e-6);
  CHECK(net.collective_seconds(s, CollectiveKind::AllReduce, 1e9) == doctest::Approx(2 * inside + across));
  CHECK(choose_algorithm(s, CollectiveKind::AllReduce, 1e9).algorithm == CollectiveAlgorithm::DatacenterHierarchical);
  // All-gather: the shards across first (1/2 * 0.25 GB), then inside.
  CHECK(net.collective_seconds(s, CollectiveKind::AllGather, 1e9) ==
        doctest::Approx(0.125 / 3.125 + (10e-3 + 8e-6) + inside));
  // Point-to-point across: the WAN share and one WAN step.
  CHECK(net.p2p_seconds(net.shape({0, 4}), 1e9) == doctest::Approx(1 / 3.125 + 10e-3 + 8e-6));
  const auto warnings = net.warnings();
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("3.12 GB/s = 12.5 GB/s / 4 GPUs") != std::string::npos);
}

TEST_CASE("a shift by whole leaves of identical nodes keeps a communicator's shape; other clusters have no shift") {
  ClusterSpec spec = toy_cluster(8, 8);
  spec.fabric.link_latency = 1e-6;
  spec.fabric.nodes_per_leaf = 2;
  const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 5e-6)};
  {
    const Cluster cluster(spec);
    const AnalyticalNetwork net(cluster, profiles);
    REQUIRE(net.shift_period() == 16);  // 2 nodes of 8 GPUs per leaf
    auto same = [&](const std::vector<int>& a, const std::vector<int>& b) {
      const CommShape x = net.shape(a), y = net.shape(b);
      return x.nodes == y.nodes && x.max_per_node == y.max_per_node && x.network_bw == y.network_bw &&
             x.network_latency == y.network_latency && x.scaleup_bw == y.scaleup_bw;
    };
    // Nodes 1 and 2 sit under different leaves, as nodes 3 and 4 do (16 GPUs on);
    // 8 GPUs on, nodes 2 and 3 share a leaf: a shift by half a leaf changes the shape.
    CHECK(same({8, 16}, {24, 32}));
    CHECK(same({8, 9, 10, 16, 17, 18}, {40, 41, 42, 48, 49, 50}));
    CHECK_FALSE(same({8, 16}, {16, 24}));
  }
  ClusterSpec slowed = spec;
  slowed.slowdowns.push_back(GpuSlowdown{3, 2.0, {}});
  const Cluster slowed_cluster(slowed);
  CHECK(AnalyticalNetwork(slowed_cluster, profiles).shift_period() == 0);  // two GPU types
  ClusterSpec mixed = spec;
  mixed.groups.push_back(mixed.groups.front());
  mixed.groups.back().node.nic_bandwidth = 20e9;
  const Cluster mixed_cluster(mixed);
  CHECK(AnalyticalNetwork(mixed_cluster, profiles).shift_period() == 0);  // two node kinds
  ClusterSpec two_dc = spec;
  two_dc.datacenters.count = 2;
  const Cluster two_dc_cluster(two_dc);
  CHECK(AnalyticalNetwork(two_dc_cluster, profiles).shift_period() == 0);
}

TEST_CASE("a shape is the same with identical nodes declared as one group or as two") {
  // With one node kind and one GPU type, shape() takes what a member owes to
  // them once (sim/network.cpp); with the nodes declared as two groups it
  // takes it member by member. Both must give every field alike, across
  // leaves, spines and datacenters.
  ClusterSpec one = toy_cluster(16, 4);
  one.fabric.nodes_per_leaf = 2;
  one.fabric.spines = 2;
  one.fabric.oversubscription = 2.0;
  one.datacenters.count = 2;
  one.datacenters.wan_bandwidth = 12.5e9;
  one.datacenters.wan_latency = 1e-3;
  ClusterSpec two = one;
  two.groups = {NodeGroup{one.groups[0].node, 6}, NodeGroup{one.groups[0].node, 10}};
  const Cluster c1(one), c2(two);
  REQUIRE(c1.num_gpus() == c2.num_gpus());
  const std::vector<CalibrationProfile> profiles{ideal_profile(2e-6, 1e-6)};
  const AnalyticalNetwork n1(c1, profiles), n2(c2, profiles);
  const std::vector<std::vector<int>> groups = {{0, 1, 2, 3},
                                                {0, 4},
                                                {0, 8, 16, 24},
                                                {1, 9, 33, 41},
                                                {0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60},
                                                {3, 35},
                                                {5, 6, 40, 63}};
  for (const std::vector<int>& m : groups) {
    CAPTURE(m.size());
    CAPTURE(m.back());
    const CommShape a = n1.shape(m), b = n2.shape(m);
    CHECK(a.size == b.size);
    CHECK(a.nodes == b.nodes);
    CHECK(a.max_per_node == b.max_per_node);
    CHECK(a.uniform_per_node == b.uniform_per_node);
    CHECK(a.scaleup_bw == b.scaleup_bw);
    CHECK(a.nvls_bw == b.nvls_bw);
    CHECK(a.network_bw == b.network_bw);
    CHECK(a.scaleup_latency == b.scaleup_latency);
    CHECK(a.network_latency == b.network_latency);
    CHECK(a.base_latency == b.base_latency);
    CHECK(a.scaleup_link_bw == b.scaleup_link_bw);
    CHECK(a.datacenters == b.datacenters);
    CHECK(a.per_dc_size == b.per_dc_size);
    CHECK(a.per_dc_nodes == b.per_dc_nodes);
    CHECK(a.wan_bw == b.wan_bw);
    CHECK(a.wan_latency == b.wan_latency);
  }
  // The groups above sit differently (one node, two, two leaves, two datacenters):
  // their shapes differ, so equal fields are not equal by default.
  CHECK(n1.shape({0, 1, 2, 3}).nodes != n1.shape({0, 4}).nodes);
  CHECK(n1.shape({0, 4}).network_latency != n1.shape({0, 8, 16, 24}).network_latency);
  CHECK(n1.shape({0, 8, 16, 24}).datacenters != n1.shape({1, 9, 33, 41}).datacenters);
}

TEST_CASE("a large group's shape is taken once and again after a link is degraded") {
  // 256 members (4 GPUs on each of 64 nodes): the size from which shapes are
  // kept (a data-parallel group at scale is shaped by the planner and again
  // by the analytical model).
  Platform platform(toy_cluster(64, 8), {ideal_profile()});
  const AnalyticalNetwork& net = platform.analytical_network();
  std::vector<int> members;
  for (int node = 0; node < 64; ++node) {
    for (int g = 0; g < 4; ++g) members.push_back(8 * node + g);
  }
  const CommShape first = net.shape(members);
  CHECK(net.shape(members) == first);
  CHECK(AnalyticalNetwork(platform.cluster(), platform.profiles()).shape(members) == first);
  // A member's NIC at a tenth of its speed: the shape reads it, not the one kept.
  const Topology& topo = platform.topology();
  std::uint32_t nic_link = 0;
  while (!(topo.link(nic_link).kind == LinkKind::GpuNic &&
           (topo.vertex(topo.link(nic_link).from).kind == VertexKind::Gpu ||
            topo.vertex(topo.link(nic_link).to).kind == VertexKind::Gpu)))
    ++nic_link;
  platform.degrade_analytical_link(nic_link, 0.1);
  const CommShape degraded = net.shape(members);
  CHECK(degraded.network_bw < first.network_bw);
  CHECK(net.shape(members) == degraded);
}
