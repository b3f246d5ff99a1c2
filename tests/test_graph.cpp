// The cluster graph: vertices and links per node, rail and fabric, ECMP
// routing and the topology checks. Expected values are derived in comments.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "topologies/graph.hpp"
#include "topology_fixtures.hpp"

using namespace trainsim;
using namespace trainsim::testing;

TEST_CASE("graph: GPUs sharing a NIC talk over NVLink, never through the NIC") {
  ClusterSpec spec = toy_cluster(2, 8);
  spec.groups[0].node.nic_count = 4;  // two GPUs per NIC, as on BLOOM's Jean Zay nodes
  const Cluster cluster(spec);
  Topology t(cluster);
  for (std::uint64_t tag = 0; tag < 16; ++tag) {
    for (int dst = 1; dst < 8; ++dst) {
      CAPTURE(dst);
      const Route r = t.route(0, static_cast<std::uint32_t>(dst), tag);
      CHECK(r.length == 2);
      for (std::uint32_t l : t.links_of(r)) CHECK(t.link(l).kind == LinkKind::ScaleUp);
    }
  }
}

TEST_CASE("graph: GPUs, scale-up switches, NICs per rail, leaves per rail, spines") {
  ClusterSpec spec = toy_cluster(4, 2);  // 4 nodes x 2 GPUs, one 10 GB/s NIC per GPU
  spec.fabric.nodes_per_leaf = 2;
  spec.fabric.spines = 2;
  const Cluster cluster(spec);
  Topology t(cluster);
  // 8 GPUs + 4 switches + 8 NICs + (2 groups x 2 rails) leaves + 2 spines.
  CHECK(t.num_vertices() == 8 + 4 + 8 + 4 + 2);
  // Links (both directions): 8 scale-up, 8 GPU-NIC, 8 access, 4 leaves x 2 spines uplinks.
  CHECK(t.num_links() == 2 * (8 + 8 + 8 + 8));
  // Same rail, same leaf: GPU -> NIC -> leaf -> NIC -> GPU.
  const Route same = t.route(0, 2, 0);
  CHECK(same.length == 4);
  // Same node: through the scale-up switch.
  const Route local = t.route(0, 1, 0);
  CHECK(local.length == 2);
  CHECK(t.link(t.links_of(local)[0]).kind == LinkKind::ScaleUp);
  // Other rail, other group: up through a spine (never relayed by another GPU).
  const Route far = t.route(0, 7, 0);
  CHECK(far.length == 6);
  for (std::uint32_t l : t.links_of(far)) {
    const std::uint32_t to = t.link(l).to;
    if (to != 7) CHECK(t.vertex(to).kind != VertexKind::Gpu);
  }
  // Uplink capacity: leaf down 2 NICs x 10 GB/s = 20 GB/s, non-blocking, over 2 spines.
  for (std::uint32_t l : t.links_of(far)) {
    if (t.link(l).kind == LinkKind::Uplink) CHECK(t.link(l).capacity == doctest::Approx(10e9));
  }
}

TEST_CASE("graph: a partly filled leaf keeps uplinks sized for all its ports") {
  // 3 nodes x 2 GPUs, 2 nodes per leaf: the second leaf of each rail holds one
  // node. Its uplinks are the switch's, sized for 2 ports (20 GB/s over 2 spines),
  // so a flow from it across the spines still gets its NIC's 10 GB/s.
  ClusterSpec spec = toy_cluster(3, 2);
  spec.fabric.nodes_per_leaf = 2;
  spec.fabric.spines = 2;
  const Cluster cluster(spec);
  Topology t(cluster);
  const Route far = t.route(4, 0, 0);  // node 2 (second leaf) -> node 0, rail 0
  int uplinks = 0;
  for (std::uint32_t l : t.links_of(far)) {
    if (t.link(l).kind != LinkKind::Uplink) continue;
    ++uplinks;
    CHECK(t.link(l).capacity == doctest::Approx(10e9));
  }
  CHECK(uplinks == 2);
}

TEST_CASE("graph: ECMP is deterministic per (src, dst, tag) and spreads tags over spines") {
  ClusterSpec spec = toy_cluster(4, 1);
  spec.fabric.nodes_per_leaf = 1;
  spec.fabric.spines = 4;
  const Cluster cluster(spec);
  Topology a(cluster), b(cluster);
  std::set<std::uint32_t> spines;
  for (std::uint64_t tag = 0; tag < 64; ++tag) {
    const Route ra = a.route(0, 3, tag), rb = b.route(0, 3, tag);
    const auto la = a.links_of(ra), lb = b.links_of(rb);
    REQUIRE(la.size() == lb.size());
    for (std::size_t i = 0; i < la.size(); ++i) CHECK(la[i] == lb[i]);
    for (std::uint32_t l : la) {
      if (a.vertex(a.link(l).to).kind == VertexKind::Spine) spines.insert(a.link(l).to);
    }
    CHECK(a.route(0, 3, tag).offset == ra.offset);  // cached
  }
  CHECK(spines.size() == 4);
}

TEST_CASE("graph: adaptive routing bundles a leaf's up-links, so no route has a choice") {
  ClusterSpec spec = toy_cluster(4, 2);  // 4 nodes x 2 GPUs, one 10 GB/s NIC per GPU
  spec.fabric.nodes_per_leaf = 2;
  spec.fabric.spines = 4;
  spec.fabric.routing = FabricRouting::Adaptive;
  const Cluster cluster(spec);
  Topology t(cluster);
  CHECK(t.fabric().bundled_spines());
  // 8 GPUs + 4 switches + 8 NICs + 4 leaves + one spine vertex for the 4 spines.
  CHECK(t.num_vertices() == 8 + 4 + 8 + 4 + 1);
  CHECK(t.num_links() == 2 * (8 + 8 + 8 + 4));
  // Leaf down 2 NICs x 10 GB/s, non-blocking: 4 up-links of 5 GB/s, bundled to 20 GB/s.
  const std::uint32_t spine_link = t.links_of(t.route(0, 7, 0))[2];
  for (std::uint64_t tag = 0; tag < 32; ++tag) {
    const Route far = t.route(0, 7, tag);
    CHECK(far.length == 6);
    CHECK_FALSE(t.route_has_choice(far));
    CHECK(t.links_of(far)[2] == spine_link);  // every tag takes the one path
    for (std::uint32_t l : t.links_of(far)) {
      if (t.link(l).kind == LinkKind::Uplink) CHECK(t.link(l).capacity == doctest::Approx(20e9));
    }
  }
  CHECK(t.vertex_name(t.link(t.links_of(t.route(0, 7, 0))[2]).to) == "spines (4, adaptive routing)");
  // The physical spines are named for degraded links (docs/faults.md).
  CHECK(t.bundled_spine_datacenter("spine 3") == 0);
  CHECK(t.bundled_spine_datacenter("spine 4") == -1);
  // Under ECMP the same fabric has 4 spines and routes that choose among them.
  spec.fabric.routing = FabricRouting::Ecmp;
  Topology ecmp{Cluster(spec)};
  CHECK(ecmp.num_vertices() == 8 + 4 + 8 + 4 + 4);
  CHECK(ecmp.route_has_choice(ecmp.route(0, 7, 0)));
  CHECK_FALSE(ecmp.route_has_choice(ecmp.route(0, 2, 0)));  // same leaf
  CHECK(ecmp.bundled_spine_datacenter("spine 3") == -1);
}

TEST_CASE("graph: fat-tree puts all NICs of a node group on one leaf") {
  ClusterSpec spec = toy_cluster(4, 2);
  spec.fabric.kind = FabricKind::FatTree;
  spec.fabric.nodes_per_leaf = 2;
  const Cluster cluster(spec);
  Topology t(cluster);
  // Cross-rail inside a leaf group: GPU 0 (rail 0) -> GPU 3 (node 1, rail 1) stays on the leaf.
  CHECK(t.route(0, 3, 0).length == 4);
  CHECK(t.route(0, 7, 0).length == 6);  // other group: via a spine
}

TEST_CASE("graph: inconsistent or disconnected descriptions are errors naming the element") {
  ClusterSpec spec = toy_cluster(4, 2);
  spec.datacenters.count = 3;
  spec.datacenters.wan_bandwidth = 50e9;
  auto problems = check_topology(spec);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].key == "datacenters/count");
  CHECK(problems[0].message.find("cannot split the cluster's 4 nodes") != std::string::npos);

  spec.datacenters.count = 2;  // no WAN bandwidth
  spec.datacenters.wan_bandwidth = 0;
  problems = check_topology(spec);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].key == "datacenters/wan_bandwidth");
  CHECK(problems[0].message.find("datacenter 1") != std::string::npos);
  CHECK_THROWS_AS(Topology(Cluster(spec)), TopologyError);

  ClusterSpec no_nic = toy_cluster(2, 2);
  no_nic.groups[0].node.nic_count = 0;
  no_nic.groups[0].node.name = "nicless";
  problems = check_topology(no_nic);
  REQUIRE_FALSE(problems.empty());
  CHECK(problems[0].message.find("nicless") != std::string::npos);
}

namespace {

// Reference hop counts: one breadth-first search per destination over the
// whole graph, with the routing rules spelled out (GPUs relay nothing; a GPU
// does not reach another GPU of its node through the NIC they share when the
// node has a scale-up switch).
std::vector<std::uint32_t> reference_hops_to(const Topology& t, std::uint32_t dst) {
  const auto nv = static_cast<std::uint32_t>(t.num_vertices());
  std::vector<std::vector<std::uint32_t>> in(nv);
  for (const TopologyLink& l : t.links()) in[l.to].push_back(l.from);
  std::vector<std::uint32_t> d(nv, Topology::kNoRoute);
  std::vector<std::uint32_t> queue{dst};
  d[dst] = 0;
  for (std::size_t q = 0; q < queue.size(); ++q) {
    const std::uint32_t x = queue[q];
    if (x != dst && t.vertex(x).kind == VertexKind::Gpu) continue;
    for (std::uint32_t u : in[x]) {
      const bool shared_nic = t.vertex(x).kind == VertexKind::Nic && t.vertex(u).kind == VertexKind::Gpu &&
                              t.vertex(dst).kind == VertexKind::Gpu && d[x] == 1 &&
                              t.switch_vertex(t.vertex(x).node) != kNoVertex;
      if (!shared_nic && d[u] == Topology::kNoRoute) {
        d[u] = d[x] + 1;
        queue.push_back(u);
      }
    }
  }
  return d;
}

void check_hops_match_reference(const ClusterSpec& spec) {
  Topology t{Cluster(spec)};
  const auto nv = static_cast<std::uint32_t>(t.num_vertices());
  for (std::uint32_t dst = 0; dst < nv; ++dst) {
    const std::vector<std::uint32_t> ref = reference_hops_to(t, dst);
    for (std::uint32_t v = 0; v < nv; ++v) {
      CAPTURE(t.vertex_name(v));
      CAPTURE(t.vertex_name(dst));
      REQUIRE(t.hops(v, dst) == ref[v]);
    }
  }
}

}  // namespace

TEST_CASE("graph: composed hop counts equal a breadth-first search per destination on every fabric") {
  // Routes depend only on these counts (ECMP picks among neighbours one hop
  // closer), so equal counts mean the same routes as full per-destination tables.
  ClusterSpec rail = toy_cluster(6, 4);
  rail.fabric.nodes_per_leaf = 2;
  rail.fabric.spines = 3;
  check_hops_match_reference(rail);
  ClusterSpec fat = rail;
  fat.fabric.kind = FabricKind::FatTree;
  check_hops_match_reference(fat);
  ClusterSpec shared = toy_cluster(4, 8);
  shared.groups[0].node.nic_count = 4;  // two GPUs per NIC
  shared.fabric.nodes_per_leaf = 2;
  check_hops_match_reference(shared);
  ClusterSpec two_dc = rail;
  two_dc.datacenters.count = 2;
  two_dc.datacenters.wan_bandwidth = 12.5e9;
  two_dc.datacenters.wan_latency = 1e-3;
  check_hops_match_reference(two_dc);
  ClusterSpec no_scaleup = toy_cluster(4, 2);
  no_scaleup.groups[0].node.scaleup = ScaleupKind::None;  // GPUs of a node meet through their NICs
  no_scaleup.fabric.nodes_per_leaf = 2;
  check_hops_match_reference(no_scaleup);
}
