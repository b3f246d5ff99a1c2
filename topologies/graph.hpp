#pragma once
// The cluster as a graph of devices joined by directed links, for the
// flow-level network (docs/network.md). Vertices: every GPU, one scale-up
// switch per node, the node's NICs (one per rail), leaf switches
// (rail-optimized: one per rail per group of nodes; fat-tree: one per group of
// nodes), spine switches per datacenter, and one WAN gateway per datacenter
// when there are several. Every physical link is two directed links, one per
// direction, each with its own capacity (bytes/s) and latency (s).
//
// Routing: shortest path by hop count that never transits another GPU; among
// equal-cost next hops a deterministic hash of (source, destination, flow tag)
// picks one (ECMP). Routes are cached per (source, destination, tag). Under
// adaptive routing a datacenter's spines are one vertex whose links carry a
// leaf's summed up-link capacity (a balanced split over every spine).
//
// graph.cpp keeps the adjacency as CSR arrays and checks connectivity with
// Boost.Graph's disjoint sets; this header is free of Boost.
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "topologies/hardware.hpp"

namespace trainsim {

const char* to_string(FabricKind k);

enum class VertexKind : std::uint8_t { Gpu, ScaleupSwitch, Nic, Leaf, Spine, Gateway };
enum class LinkKind : std::uint8_t {
  ScaleUp,  // GPU <-> its node's scale-up switch (NVLink / NVSwitch)
  GpuNic,   // GPU <-> NIC (PCIe)
  Access,   // NIC <-> leaf
  Uplink,   // leaf <-> spine
  DcEdge,   // spine <-> datacenter gateway
  Wan,      // gateway <-> gateway
};
const char* to_string(VertexKind k);
const char* to_string(LinkKind k);

struct TopologyVertex {
  VertexKind kind = VertexKind::Gpu;
  int node = -1;  // Gpu, ScaleupSwitch, Nic: the node
  int index = 0;  // Gpu: global GPU id; Nic, Leaf: rail (-1 for fat-tree leaves); Spine: spine index (-1: bundle)
  int group = 0;  // Leaf: group of nodes within its datacenter
  int datacenter = 0;
};

struct TopologyLink {
  std::uint32_t from = 0, to = 0;  // vertex ids
  double capacity = 0;             // bytes/s
  double latency = 0;              // seconds
  LinkKind kind = LinkKind::ScaleUp;
};

// A problem with the cluster's network description; `message` names the element.
class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A problem found by check_topology: `key` is the offending cluster key
// relative to the cluster object ("fabric/nodes_per_leaf", "datacenters/count",
// "" for the cluster as a whole).
struct TopologyProblem {
  std::string key;
  std::string message;
};

// Where nodes sit in the scale-out network and what a leaf's uplinks carry.
// The graph is built from these facts and the analytical network model reads
// the same ones, so both fidelities agree on what the fabric is.
struct FabricFacts {
  FabricKind kind = FabricKind::RailOptimized;
  int datacenters = 1;
  int nodes_per_datacenter = 1;  // nodes are split evenly in global node order
  int nodes_per_leaf = 1;        // nodes under one leaf
  int leaf_ports = 1;            // down ports of one leaf (rail-optimized: one per node; fat-tree: NICs per node)
  int spines = 0;                // spine switches per datacenter; 0 = no spine tier
  double oversubscription = 1;
  double link_latency = 0;  // per NIC-leaf, leaf-spine, spine-gateway link
  FabricRouting routing = FabricRouting::Ecmp;
  int qps_per_connection = 1;
  // Adaptive routing over several spines: the graph has one spine vertex per
  // datacenter whose links bundle a leaf's `spines` up-links (docs/network.md).
  bool bundled_spines() const { return routing == FabricRouting::Adaptive && spines > 1; }
  int datacenter_of(int node) const { return node / nodes_per_datacenter; }
  // Leaf group of a node inside its datacenter (with the rail, names its leaf).
  int leaf_group_of(int node) const { return (node % nodes_per_datacenter) / nodes_per_leaf; }
};
FabricFacts fabric_facts(const ClusterSpec& spec);
// Capacity per direction of one leaf-spine link above the leaf of (datacenter,
// group, rail; rail -1 for a fat-tree leaf): the leaf's down capacity when all
// its ports are in use, / oversubscription, / spines. 0 without spines or when
// no node of the group has a NIC on the rail.
double uplink_capacity(const Cluster& cluster, const FabricFacts& facts, int datacenter, int group, int rail);

// Every problem of the spec's fabric and datacenters, including a graph that
// would leave some GPU unable to reach another. Empty = Topology(spec) succeeds.
std::vector<TopologyProblem> check_topology(const ClusterSpec& spec);

// A cached route: `length` link ids at `offset` in the topology's route pool.
struct Route {
  std::uint32_t offset = 0, length = 0;
  double latency = 0;  // sum of the links' latencies, seconds
};

inline constexpr std::uint32_t kNoVertex = ~std::uint32_t{0};

class Topology {
 public:
  // Throws TopologyError naming the element when the description is
  // inconsistent or the graph is disconnected.
  explicit Topology(const Cluster& cluster);
  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  std::size_t num_vertices() const { return vertices_.size(); }
  std::size_t num_links() const { return links_.size(); }
  const TopologyVertex& vertex(std::uint32_t v) const { return vertices_[v]; }
  const TopologyLink& link(std::uint32_t l) const { return links_[l]; }
  std::span<const TopologyLink> links() const { return links_; }
  std::string vertex_name(std::uint32_t v) const;
  std::string link_name(std::uint32_t l) const;

  // GPU vertices are numbered like global GPU ids.
  std::uint32_t gpu_vertex(int gpu) const { return static_cast<std::uint32_t>(gpu); }
  // The node's scale-up switch; kNoVertex when the node has no scale-up domain.
  std::uint32_t switch_vertex(int node) const { return switch_of_node_[node]; }
  int node_of_gpu(int gpu) const { return vertices_[gpu].node; }
  int datacenter_of_node(int node) const { return dc_of_node_[node]; }
  int num_datacenters() const { return num_dcs_; }

  // Route from src to dst (vertex ids, src != dst) for a flow with `tag`.
  Route route(std::uint32_t src, std::uint32_t dst, std::uint64_t tag);
  // Route src -> via -> dst (a GPU relaying over its scale-up links, like
  // NCCL's PXN), cached like route().
  Route route_via(std::uint32_t src, std::uint32_t via, std::uint32_t dst, std::uint64_t tag);
  FabricKind fabric_kind() const { return fabric_kind_; }
  const FabricFacts& fabric() const { return facts_; }
  // With adaptive routing over several spines, where the graph bundles them:
  // the datacenter whose spine `name` ("spine 3", "spine 3 of datacenter 1")
  // is one of the bundled spines, else -1.
  int bundled_spine_datacenter(const std::string& name) const;
  // Whether hashing chose between equal-cost links somewhere on the route
  // (several spines under ECMP, parallel WAN links).
  bool route_has_choice(const Route& r) const;
  // The rail (NIC index in its node) a GPU sends through; -1 without NICs.
  int rail_of_gpu(int gpu) const { return rail_of_gpu_[gpu]; }
  // The first GPU of `node` whose NIC is on `rail`; -1 if none.
  int gpu_on_rail(int node, int rail) const;
  std::span<const std::uint32_t> links_of(const Route& r) const { return {route_pool_.data() + r.offset, r.length}; }
  // A route over the given links (not computed here: e.g. the images of a
  // route's links under a symmetry of the cluster), kept in the route pool.
  Route add_route(std::span<const std::uint32_t> links, double latency);
  // Links on a shortest path from v to t that transits no other GPU (the
  // length of route(v, t, ...)); kNoRoute when there is none.
  static constexpr std::uint32_t kNoRoute = 1u << 30;
  std::uint32_t hops(std::uint32_t v, std::uint32_t t);
  std::size_t cached_routes() const;
  // Bytes held by routing caches (distance tables and routes).
  std::size_t cache_bytes() const;

 private:
  struct Cache;
  bool nic_between_gpus(std::uint32_t from, std::uint32_t nic, std::uint32_t dst, std::uint32_t nic_hops) const;
  // Hop counts for routing are kept only between core switches (leaves,
  // spines, gateways): memory grows with the square of the leaf count, not of
  // the GPU count; hops() composes the rest from a vertex's neighbours.
  void prepare_routing();
  const std::vector<std::uint16_t>& core_distances_to(std::uint32_t core_target);

  std::vector<TopologyVertex> vertices_;
  std::vector<TopologyLink> links_;
  std::vector<std::uint32_t> out_offsets_, out_links_;  // CSR of outgoing links per vertex
  std::vector<std::uint32_t> in_offsets_, in_links_;    // CSR of incoming links per vertex
  std::vector<std::uint32_t> switch_of_node_;
  std::vector<int> dc_of_node_;
  int num_dcs_ = 1;
  FabricKind fabric_kind_ = FabricKind::RailOptimized;
  FabricFacts facts_;
  int wan_links_ = 1;
  std::vector<int> rail_of_gpu_;
  std::vector<int> first_gpu_of_node_;
  std::vector<std::uint32_t> route_pool_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace trainsim
