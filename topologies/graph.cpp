#include "topologies/graph.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_map>
#include <utility>

#include <boost/pending/disjoint_sets.hpp>

namespace trainsim {

const char* to_string(FabricKind k) {
  switch (k) {
    case FabricKind::RailOptimized:
      return "rail-optimized";
    case FabricKind::FatTree:
      return "fat-tree";
  }
  return "?";
}

const char* to_string(VertexKind k) {
  switch (k) {
    case VertexKind::Gpu:
      return "gpu";
    case VertexKind::ScaleupSwitch:
      return "scale-up switch";
    case VertexKind::Nic:
      return "nic";
    case VertexKind::Leaf:
      return "leaf";
    case VertexKind::Spine:
      return "spine";
    case VertexKind::Gateway:
      return "gateway";
  }
  return "?";
}

const char* to_string(LinkKind k) {
  switch (k) {
    case LinkKind::ScaleUp:
      return "scale-up";
    case LinkKind::GpuNic:
      return "gpu-nic";
    case LinkKind::Access:
      return "access";
    case LinkKind::Uplink:
      return "uplink";
    case LinkKind::DcEdge:
      return "dc-edge";
    case LinkKind::Wan:
      return "wan";
  }
  return "?";
}

namespace {

constexpr std::uint16_t kUnreachable = 0xFFFF;
constexpr int kLeafPorts = 32;  // down ports of the default leaf (a 64-port switch, half up)

std::uint64_t mix(std::uint64_t x) {
  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int num_nodes(const ClusterSpec& spec) {
  int n = 0;
  for (const auto& g : spec.groups) n += g.count;
  return n;
}

int max_nics(const ClusterSpec& spec) {
  int n = 0;
  for (const auto& g : spec.groups) n = std::max(n, g.node.nic_count);
  return n;
}

int nodes_per_leaf(const ClusterSpec& spec) {
  if (spec.fabric.nodes_per_leaf > 0) return spec.fabric.nodes_per_leaf;
  if (spec.fabric.kind == FabricKind::RailOptimized) return kLeafPorts;
  return std::max(1, kLeafPorts / std::max(1, max_nics(spec)));
}

// Problems visible without building the graph.
std::vector<TopologyProblem> spec_problems(const ClusterSpec& spec) {
  std::vector<TopologyProblem> out;
  const int nodes = num_nodes(spec);
  const DatacenterSpec& dc = spec.datacenters;
  if (dc.count < 1) {
    out.push_back({"datacenters/count", "expected at least 1 datacenter, found " + std::to_string(dc.count)});
  } else if (nodes % dc.count != 0) {
    out.push_back({"datacenters/count", std::to_string(dc.count) + " datacenters cannot split the cluster's " +
                                            std::to_string(nodes) + " nodes evenly"});
  }
  if (dc.count > 1 && !(dc.wan_bandwidth > 0)) {
    out.push_back({"datacenters/wan_bandwidth", "datacenter 1 cannot reach datacenter 0: " + std::to_string(dc.count) +
                                                    " datacenters need WAN links with a bandwidth > 0"});
  }
  if (dc.wan_latency < 0) out.push_back({"datacenters/wan_latency", "expected a latency >= 0"});
  const FabricSpec& f = spec.fabric;
  if (!(f.oversubscription >= 1.0)) {
    out.push_back({"fabric/oversubscription", "expected an oversubscription ratio >= 1"});
  }
  if (f.nodes_per_leaf < 0) out.push_back({"fabric/nodes_per_leaf", "expected a positive node count"});
  if (f.spines < 0) out.push_back({"fabric/spines", "expected a positive spine count"});
  if (f.qps_per_connection < 1 || f.qps_per_connection > kMaxQpsPerConnection) {
    out.push_back({"fabric/qps_per_connection",
                   "expected 1 to " + std::to_string(kMaxQpsPerConnection) + " queue pairs per connection"});
  }
  if (f.link_latency < 0) out.push_back({"fabric/link_latency", "expected a latency >= 0"});
  for (std::size_t g = 0; g < spec.groups.size(); ++g) {
    const NodeSpec& n = spec.groups[g].node;
    const std::string where = "node \"" + n.name + "\" (group " + std::to_string(g) + ")";
    if (n.gpus_per_node < 1) out.push_back({"groups", where + " has no GPUs"});
    if (n.gpus_per_node > 1 && n.scaleup != ScaleupKind::None && !(n.scaleup_bandwidth > 0)) {
      out.push_back({"groups", where + ": scale-up links need a bandwidth > 0"});
    }
    if (n.nic_count > 0 && !(n.nic_bandwidth > 0)) {
      out.push_back({"groups", where + ": NICs need a bandwidth > 0"});
    }
    if (nodes > 1 && n.nic_count < 1) {
      out.push_back({"groups", where + " has no NICs: its GPUs cannot reach other nodes"});
    }
    if (nodes == 1 && n.nic_count < 1 && n.gpus_per_node > 1 && n.scaleup == ScaleupKind::None) {
      out.push_back({"groups", where + " has neither scale-up links nor NICs: its GPUs cannot reach each other"});
    }
  }
  return out;
}

}  // namespace

struct Topology::Cache {
  struct Key {
    std::uint32_t src, dst;
    std::uint64_t tag;
    std::uint32_t via;  // kNoVertex for a direct route
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return static_cast<std::size_t>(mix((static_cast<std::uint64_t>(k.src) << 32 | k.dst) ^ mix(k.tag) ^
                                          (static_cast<std::uint64_t>(k.via) << 7)));
    }
  };
  std::unordered_map<Key, Route, KeyHash> routes;
  // NICs and scale-up switches touch only GPUs and core switches (leaves,
  // spines, gateways), so hop counts are kept between core switches only, one
  // table per core target computed on first use; hops() composes the rest.
  bool prepared = false;
  std::vector<std::uint32_t> core_of;  // vertex -> core index; kNoVertex when not core
  // Reverse core graph: predecessors u of core y with the hops u -> y (1, or 2
  // through a NIC or scale-up switch).
  std::vector<std::uint32_t> core_in_offsets;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> core_in;
  std::vector<std::vector<std::uint16_t>> core_dist;  // [core target][core source]; empty = not computed
  std::vector<std::vector<std::uint32_t>> buckets;
  std::size_t dist_bytes = 0;
  std::vector<std::uint32_t> candidates;
};

FabricFacts fabric_facts(const ClusterSpec& spec) {
  FabricFacts f;
  const FabricSpec& fab = spec.fabric;
  f.kind = fab.kind;
  f.datacenters = std::max(1, spec.datacenters.count);
  f.nodes_per_datacenter = std::max(1, num_nodes(spec) / f.datacenters);
  f.nodes_per_leaf = std::max(1, nodes_per_leaf(spec));
  f.leaf_ports = f.nodes_per_leaf * (fab.kind == FabricKind::RailOptimized ? 1 : std::max(1, max_nics(spec)));
  f.oversubscription = fab.oversubscription;
  f.link_latency = fab.link_latency;
  f.routing = fab.routing;
  f.qps_per_connection = fab.qps_per_connection;
  const int groups = (f.nodes_per_datacenter + f.nodes_per_leaf - 1) / f.nodes_per_leaf;
  const int rails = fab.kind == FabricKind::RailOptimized ? std::max(1, max_nics(spec)) : 1;
  if (groups * rails > 1 || f.datacenters > 1) {
    // One spine per leaf uplink port by default: a leaf's uplinks are sized for
    // all its down ports / oversubscription (the same rule as uplink_capacity).
    f.spines = fab.spines > 0 ? fab.spines
                              : std::max(1, static_cast<int>(std::ceil(f.leaf_ports / f.oversubscription - 1e-9)));
  }
  return f;
}

double uplink_capacity(const Cluster& cluster, const FabricFacts& facts, int datacenter, int group, int rail) {
  if (facts.spines <= 0) return 0.0;
  const int lo = datacenter * facts.nodes_per_datacenter + group * facts.nodes_per_leaf;
  const int hi = std::min((datacenter + 1) * facts.nodes_per_datacenter, lo + facts.nodes_per_leaf);
  double cap = 0;
  int ports_used = 0;
  for (int n = lo; n < hi; ++n) {
    const NodeSpec& ns = cluster.node_spec(n);
    const int nics = rail < 0 ? ns.nic_count : (rail < ns.nic_count ? 1 : 0);
    cap += ns.nic_bandwidth * nics;
    ports_used += nics;
  }
  if (ports_used == 0) return 0.0;
  // A leaf's uplinks are sized for all its down ports, not for the nodes that
  // happen to sit under it (the last leaf of a cluster may be partly filled).
  cap *= static_cast<double>(facts.leaf_ports) / ports_used;
  return cap / facts.oversubscription / facts.spines;
}

std::vector<TopologyProblem> check_topology(const ClusterSpec& spec) {
  std::vector<TopologyProblem> out = spec_problems(spec);
  if (!out.empty() || spec.groups.empty()) return out;
  try {
    const Topology t{Cluster(spec)};
  } catch (const TopologyError& e) {
    out.push_back({"", e.what()});
  }
  return out;
}

Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

Topology::Topology(const Cluster& cluster) : cache_(std::make_unique<Cache>()) {
  const ClusterSpec& spec = cluster.spec();
  if (const auto problems = spec_problems(spec); !problems.empty()) {
    throw TopologyError("cluster" + (problems[0].key.empty() ? "" : "/" + problems[0].key) + ": " +
                        problems[0].message);
  }
  const int nodes = cluster.num_nodes();
  const int gpus = cluster.num_gpus();
  const FabricSpec& fab = spec.fabric;
  const DatacenterSpec& dcs = spec.datacenters;
  num_dcs_ = dcs.count;
  wan_links_ = dcs.wan_links;
  fabric_kind_ = fab.kind;
  rail_of_gpu_.assign(gpus, -1);
  first_gpu_of_node_.assign(nodes + 1, gpus);
  const int nodes_per_dc = nodes / num_dcs_;

  auto add_vertex = [&](TopologyVertex v) {
    vertices_.push_back(v);
    return static_cast<std::uint32_t>(vertices_.size() - 1);
  };
  auto connect = [&](std::uint32_t a, std::uint32_t b, double capacity, double latency, LinkKind kind) {
    links_.push_back(TopologyLink{a, b, capacity, latency, kind});
    links_.push_back(TopologyLink{b, a, capacity, latency, kind});
  };

  dc_of_node_.resize(nodes);
  for (int n = 0; n < nodes; ++n) dc_of_node_[n] = n / nodes_per_dc;
  for (int g = 0; g < gpus; ++g) {
    const int node = cluster.node_of(g);
    add_vertex(TopologyVertex{VertexKind::Gpu, node, g, 0, dc_of_node_[node]});
  }

  // Scale-up domain and NICs of every node.
  switch_of_node_.assign(nodes, kNoVertex);
  std::vector<std::vector<std::uint32_t>> nics_of_node(nodes);
  int first_gpu = 0;
  for (int n = 0; n < nodes; ++n) {
    const NodeSpec& ns = cluster.node_spec(n);
    const int per = ns.gpus_per_node;
    first_gpu_of_node_[n] = first_gpu;
    if (per > 1 && ns.scaleup != ScaleupKind::None) {
      switch_of_node_[n] = add_vertex(TopologyVertex{VertexKind::ScaleupSwitch, n, 0, 0, dc_of_node_[n]});
      for (int l = 0; l < per; ++l) {
        connect(static_cast<std::uint32_t>(first_gpu + l), switch_of_node_[n], ns.scaleup_bandwidth, 0.0,
                LinkKind::ScaleUp);
      }
    }
    const int nics = ns.nic_count;
    for (int i = 0; i < nics; ++i) {
      nics_of_node[n].push_back(add_vertex(TopologyVertex{VertexKind::Nic, n, i, 0, dc_of_node_[n]}));
    }
    // GPU l uses NIC l*nics/per; with more NICs than GPUs, NIC i serves GPU i*per/nics.
    for (int l = 0; l < per; ++l) {
      for (int i = 0; i < nics; ++i) {
        if (l * nics / per == i || i * per / nics == l) {
          if (rail_of_gpu_[first_gpu + l] < 0) rail_of_gpu_[first_gpu + l] = i;
          connect(static_cast<std::uint32_t>(first_gpu + l), nics_of_node[n][i], ns.nic_bandwidth, 0.0,
                  LinkKind::GpuNic);
        }
      }
    }
    first_gpu += per;
  }

  // Leaves and spines of each datacenter, then the WAN.
  facts_ = fabric_facts(spec);
  const FabricFacts& facts = facts_;
  const int npl = facts.nodes_per_leaf;
  const int rails = fab.kind == FabricKind::RailOptimized ? std::max(1, max_nics(spec)) : 1;
  std::vector<std::uint32_t> gateways;
  for (int d = 0; d < num_dcs_; ++d) {
    const int first = d * nodes_per_dc;
    const int groups = (nodes_per_dc + npl - 1) / npl;
    std::vector<std::uint32_t> leaves;
    std::vector<double> uplink;  // capacity of each leaf-spine link of each leaf
    for (int g = 0; g < groups; ++g) {
      const int lo = first + g * npl, hi = std::min(first + nodes_per_dc, lo + npl);
      for (int r = 0; r < rails; ++r) {
        const int rail = fab.kind == FabricKind::RailOptimized ? r : -1;
        bool any_nic = false;
        for (int n = lo; n < hi; ++n)
          any_nic |= rail < 0 ? cluster.node_spec(n).nic_count > 0 : rail < cluster.node_spec(n).nic_count;
        if (!any_nic) continue;  // no node of this group has a NIC on this rail
        const std::uint32_t leaf = add_vertex(TopologyVertex{VertexKind::Leaf, -1, rail, g, d});
        for (int n = lo; n < hi; ++n) {
          const NodeSpec& ns = cluster.node_spec(n);
          for (int i = 0; i < ns.nic_count; ++i) {
            if (rail >= 0 && i != rail) continue;
            connect(nics_of_node[n][i], leaf, ns.nic_bandwidth, fab.link_latency, LinkKind::Access);
          }
        }
        leaves.push_back(leaf);
        uplink.push_back(uplink_capacity(cluster, facts, d, g, rail));
      }
    }
    std::vector<std::uint32_t> spines;
    // Adaptive routing spreads a leaf's traffic over all its up-links by load:
    // one spine vertex whose links carry the sum of a leaf's up-links (and of
    // the spines' links to the gateway) leaves no choice to hash.
    const int bundle = facts.bundled_spines() ? facts.spines : 1;
    if (facts.spines > 0) {
      for (int s = 0; s < facts.spines / bundle; ++s) {
        spines.push_back(add_vertex(TopologyVertex{VertexKind::Spine, -1, bundle > 1 ? -1 : s, 0, d}));
      }
      for (std::size_t l = 0; l < leaves.size(); ++l) {
        for (std::uint32_t s : spines) connect(leaves[l], s, uplink[l] * bundle, fab.link_latency, LinkKind::Uplink);
      }
    }
    if (num_dcs_ > 1) {
      const std::uint32_t gw = add_vertex(TopologyVertex{VertexKind::Gateway, -1, d, 0, d});
      gateways.push_back(gw);
      for (std::uint32_t s : spines) {
        connect(s, gw, dcs.wan_bandwidth * dcs.wan_links * (num_dcs_ - 1) * bundle, fab.link_latency, LinkKind::DcEdge);
      }
    }
  }
  if (dcs.wan_bandwidth > 0) {
    for (int a = 0; a < num_dcs_; ++a) {
      for (int b = a + 1; b < num_dcs_; ++b) {
        // Parallel links between two gateways: routing spreads flows over them (ECMP).
        for (int k = 0; k < dcs.wan_links; ++k) {
          connect(gateways[a], gateways[b], dcs.wan_bandwidth, dcs.wan_latency, LinkKind::Wan);
        }
      }
    }
  }

  // Adjacency in insertion order (so routing is deterministic): the outgoing
  // and incoming links of every vertex as CSR arrays, by a stable counting sort.
  const std::size_t nv = vertices_.size();
  out_offsets_.assign(nv + 1, 0);
  in_offsets_.assign(nv + 1, 0);
  for (std::uint32_t l = 0; l < links_.size(); ++l) {
    if (!(links_[l].capacity > 0)) {
      throw TopologyError("link " + link_name(l) + " has no capacity");
    }
    ++out_offsets_[links_[l].from + 1];
    ++in_offsets_[links_[l].to + 1];
  }
  for (std::size_t v = 0; v < nv; ++v) {
    out_offsets_[v + 1] += out_offsets_[v];
    in_offsets_[v + 1] += in_offsets_[v];
  }
  out_links_.resize(links_.size());
  in_links_.resize(links_.size());
  {
    std::vector<std::uint32_t> out_next(out_offsets_.begin(), out_offsets_.end() - 1);
    std::vector<std::uint32_t> in_next(in_offsets_.begin(), in_offsets_.end() - 1);
    for (std::uint32_t l = 0; l < links_.size(); ++l) {
      out_links_[out_next[links_[l].from]++] = l;
      in_links_[in_next[links_[l].to]++] = l;
    }
  }

  // GPUs relay nothing: two GPUs can talk when they attach to a common
  // component of the switch graph (GPUs removed). Every GPU of a multi-node
  // cluster must attach to the network component of GPU 0; every switch must
  // belong to some GPU's component. Components by Boost.Graph's disjoint sets
  // (union-find: no per-vertex allocation, so the check stays cheap at 16k GPUs).
  std::vector<std::uint32_t> rank(nv, 0), parent(nv);
  boost::disjoint_sets<std::uint32_t*, std::uint32_t*> sets(rank.data(), parent.data());
  for (std::uint32_t v = 0; v < nv; ++v) sets.make_set(v);
  for (const TopologyLink& l : links_) {
    if (vertices_[l.from].kind != VertexKind::Gpu && vertices_[l.to].kind != VertexKind::Gpu && l.from < l.to) {
      sets.union_set(l.from, l.to);
    }
  }
  std::vector<std::uint32_t> comp(nv);
  for (std::uint32_t v = 0; v < nv; ++v) comp[v] = sets.find_set(v);
  auto network_component = [&](int gpu) {
    for (std::uint32_t i = out_offsets_[gpu]; i < out_offsets_[gpu + 1]; ++i) {
      const TopologyLink& l = links_[out_links_[i]];
      if (l.kind == LinkKind::GpuNic) return static_cast<int>(comp[l.to]);
    }
    return -1;
  };
  std::vector<char> used(nv, 0);
  if (gpus > 0) {
    const int main = network_component(0);
    for (int g = 0; g < gpus; ++g) {
      const int c = network_component(g);
      if (nodes > 1 && c != main) {
        const int dc = vertices_[g].datacenter;
        if (main >= 0 && c >= 0 && dc != vertices_[0].datacenter) {
          throw TopologyError("datacenter " + std::to_string(dc) + " is not connected to datacenter " +
                              std::to_string(vertices_[0].datacenter) + ": " + vertex_name(g) + " cannot reach " +
                              vertex_name(0));
        }
        throw TopologyError(vertex_name(g) + " cannot reach " + vertex_name(0) + " through the network");
      }
      for (std::uint32_t i = out_offsets_[g]; i < out_offsets_[g + 1]; ++i) used[comp[links_[out_links_[i]].to]] = 1;
    }
  }
  for (std::uint32_t v = 0; v < nv; ++v) {
    if (vertices_[v].kind != VertexKind::Gpu && !used[comp[v]]) {
      throw TopologyError(vertex_name(v) + " is not connected to any GPU");
    }
  }
}

std::string Topology::vertex_name(std::uint32_t v) const {
  const TopologyVertex& x = vertices_[v];
  const std::string dc = num_dcs_ > 1 ? " of datacenter " + std::to_string(x.datacenter) : "";
  switch (x.kind) {
    case VertexKind::Gpu:
      return "gpu " + std::to_string(x.index) + " (node " + std::to_string(x.node) + ")";
    case VertexKind::ScaleupSwitch:
      return "scale-up switch of node " + std::to_string(x.node);
    case VertexKind::Nic:
      return "nic " + std::to_string(x.index) + " of node " + std::to_string(x.node);
    case VertexKind::Leaf:
      return "leaf " + (x.index >= 0 ? "rail " + std::to_string(x.index) + " " : std::string()) + "group " +
             std::to_string(x.group) + dc;
    case VertexKind::Spine:
      return x.index < 0 ? "spines (" + std::to_string(facts_.spines) + ", adaptive routing)" + dc
                         : "spine " + std::to_string(x.index) + dc;
    case VertexKind::Gateway:
      return "gateway of datacenter " + std::to_string(x.datacenter);
  }
  return "?";
}

std::string Topology::link_name(std::uint32_t l) const {
  return std::string(to_string(links_[l].kind)) + " link " + vertex_name(links_[l].from) + " -> " +
         vertex_name(links_[l].to);
}

// A NIC is a GPU's way out of the node, not a switch between two GPUs sharing
// it: GPU -> NIC -> GPU would take PCIe where NCCL takes NVLink. In a node
// without scale-up links that PCIe path is the only one, and it is allowed.
bool Topology::nic_between_gpus(std::uint32_t from, std::uint32_t nic, std::uint32_t dst,
                                std::uint32_t nic_hops) const {
  return vertices_[nic].kind == VertexKind::Nic && vertices_[from].kind == VertexKind::Gpu &&
         vertices_[dst].kind == VertexKind::Gpu && nic_hops == 1 && switch_of_node_[vertices_[nic].node] != kNoVertex;
}

void Topology::prepare_routing() {
  Cache& c = *cache_;
  c.prepared = true;
  const auto nv = static_cast<std::uint32_t>(vertices_.size());
  auto is_core = [&](std::uint32_t v) {
    const VertexKind k = vertices_[v].kind;
    return k == VertexKind::Leaf || k == VertexKind::Spine || k == VertexKind::Gateway;
  };
  for (std::uint32_t v = 0; v < nv; ++v) {
    if (vertices_[v].kind == VertexKind::Gpu || is_core(v)) continue;
    for (std::uint32_t i = out_offsets_[v]; i < out_offsets_[v + 1]; ++i) {
      const std::uint32_t u = links_[out_links_[i]].to;
      if (vertices_[u].kind != VertexKind::Gpu && !is_core(u)) {
        throw TopologyError("routing expects NICs and scale-up switches to link only GPUs and fabric switches, not " +
                            link_name(out_links_[i]));
      }
    }
  }
  c.core_of.assign(nv, kNoVertex);
  std::uint32_t nc = 0;
  for (std::uint32_t v = 0; v < nv; ++v) {
    if (is_core(v)) c.core_of[v] = nc++;
  }
  // Core-to-core steps: a direct link, or two links through a NIC or scale-up
  // switch (GPUs relay nothing, so no other path joins two core switches).
  std::vector<std::array<std::uint32_t, 3>> steps;  // (to, from, hops)
  for (std::uint32_t v = 0; v < nv; ++v) {
    if (c.core_of[v] == kNoVertex) continue;
    for (std::uint32_t i = out_offsets_[v]; i < out_offsets_[v + 1]; ++i) {
      const std::uint32_t x = links_[out_links_[i]].to;
      if (c.core_of[x] != kNoVertex) {
        steps.push_back({c.core_of[x], c.core_of[v], 1});
      } else if (vertices_[x].kind != VertexKind::Gpu) {
        for (std::uint32_t j = out_offsets_[x]; j < out_offsets_[x + 1]; ++j) {
          const std::uint32_t y = links_[out_links_[j]].to;
          if (y != v && c.core_of[y] != kNoVertex) steps.push_back({c.core_of[y], c.core_of[v], 2});
        }
      }
    }
  }
  std::sort(steps.begin(), steps.end());
  c.core_in_offsets.assign(nc + 1, 0);
  c.core_in.clear();
  c.core_in.reserve(steps.size());
  for (const auto& st : steps) {
    ++c.core_in_offsets[st[0] + 1];
    c.core_in.emplace_back(st[1], st[2]);
  }
  for (std::uint32_t i = 0; i < nc; ++i) c.core_in_offsets[i + 1] += c.core_in_offsets[i];
  c.core_dist.resize(nc);
}

const std::vector<std::uint16_t>& Topology::core_distances_to(std::uint32_t target) {
  Cache& c = *cache_;
  std::vector<std::uint16_t>& dist = c.core_dist[target];
  if (!dist.empty()) return dist;
  // Breadth-first search with steps of 1 or 2 hops: one bucket per distance.
  dist.assign(c.core_dist.size(), kUnreachable);
  dist[target] = 0;
  c.buckets.assign(1, {target});
  for (std::size_t d = 0; d < c.buckets.size(); ++d) {
    for (std::size_t k = 0; k < c.buckets[d].size(); ++k) {
      const std::uint32_t y = c.buckets[d][k];
      if (dist[y] != d) continue;
      for (std::uint32_t i = c.core_in_offsets[y]; i < c.core_in_offsets[y + 1]; ++i) {
        const auto [u, w] = c.core_in[i];
        const std::size_t du = d + w;
        if (du < dist[u]) {
          dist[u] = static_cast<std::uint16_t>(du);
          if (c.buckets.size() <= du) c.buckets.resize(du + 1);
          c.buckets[du].push_back(u);
        }
      }
    }
  }
  c.dist_bytes += dist.size() * sizeof(std::uint16_t);
  return dist;
}

namespace {
constexpr std::uint32_t kFar = Topology::kNoRoute;
std::uint32_t plus_one(std::uint32_t h) { return h >= kFar ? kFar : h + 1; }
}  // namespace

std::uint32_t Topology::hops(std::uint32_t v, std::uint32_t t) {
  if (v == t) return 0;
  Cache& c = *cache_;
  if (!c.prepared) prepare_routing();
  std::uint32_t best = kFar;
  if (vertices_[v].kind == VertexKind::Gpu) {
    // A GPU starts a path: one step to the target or to a switch or NIC.
    const bool gpu_target = vertices_[t].kind == VertexKind::Gpu;
    for (std::uint32_t i = out_offsets_[v]; i < out_offsets_[v + 1]; ++i) {
      const std::uint32_t u = links_[out_links_[i]].to;
      if (u == t) return 1;
      if (vertices_[u].kind == VertexKind::Gpu) continue;
      const std::uint32_t hu = hops(u, t);
      if (gpu_target && nic_between_gpus(v, u, t, hu)) continue;
      best = std::min(best, plus_one(hu));
    }
    return best;
  }
  if (const std::uint32_t ct = c.core_of[t]; ct != kNoVertex) {
    const std::vector<std::uint16_t>& dist = core_distances_to(ct);
    auto core_hops = [&](std::uint32_t u) { return dist[c.core_of[u]] == kUnreachable ? kFar : dist[c.core_of[u]]; };
    if (c.core_of[v] != kNoVertex) return core_hops(v);
    // A NIC or scale-up switch: its next step is a core switch.
    for (std::uint32_t i = out_offsets_[v]; i < out_offsets_[v + 1]; ++i) {
      const std::uint32_t u = links_[out_links_[i]].to;
      if (c.core_of[u] != kNoVertex) best = std::min(best, plus_one(core_hops(u)));
    }
    return best;
  }
  // The target is a GPU, NIC or scale-up switch: the path's last step comes
  // from one of its neighbours that relays (not a GPU).
  for (std::uint32_t i = in_offsets_[t]; i < in_offsets_[t + 1]; ++i) {
    const std::uint32_t x = links_[in_links_[i]].from;
    if (x == v) return 1;
    if (vertices_[x].kind == VertexKind::Gpu) continue;
    best = std::min(best, plus_one(hops(v, x)));
  }
  return best;
}

Route Topology::add_route(std::span<const std::uint32_t> links, double latency) {
  Route r;
  r.offset = static_cast<std::uint32_t>(route_pool_.size());
  r.length = static_cast<std::uint32_t>(links.size());
  r.latency = latency;
  route_pool_.insert(route_pool_.end(), links.begin(), links.end());
  return r;
}

Route Topology::route(std::uint32_t src, std::uint32_t dst, std::uint64_t tag) {
  const Cache::Key key{src, dst, tag, kNoVertex};
  if (auto it = cache_->routes.find(key); it != cache_->routes.end()) return it->second;
  if (!cache_->prepared) prepare_routing();
  std::uint32_t dv = hops(src, dst);
  if (dv >= kFar) {
    throw TopologyError("no route from " + vertex_name(src) + " to " + vertex_name(dst));
  }
  Route r;
  r.offset = static_cast<std::uint32_t>(route_pool_.size());
  std::uint32_t v = src;
  std::uint64_t hop = 0;
  auto& cand = cache_->candidates;
  while (v != dst) {
    cand.clear();
    for (std::uint32_t i = out_offsets_[v]; i < out_offsets_[v + 1]; ++i) {
      const std::uint32_t l = out_links_[i];
      const std::uint32_t u = links_[l].to;
      if (u != dst && vertices_[u].kind == VertexKind::Gpu) continue;
      const std::uint32_t hu = hops(u, dst);
      if (hu + 1 == dv && !nic_between_gpus(v, u, dst, hu)) cand.push_back(l);
    }
    const std::uint32_t pick =
        cand.size() == 1 ? cand[0]
                         : cand[mix(mix((static_cast<std::uint64_t>(src) << 32) | dst) ^ mix(tag) ^ hop) % cand.size()];
    route_pool_.push_back(pick);
    r.latency += links_[pick].latency;
    v = links_[pick].to;
    --dv;
    ++hop;
  }
  r.length = static_cast<std::uint32_t>(route_pool_.size() - r.offset);
  cache_->routes.emplace(key, r);
  return r;
}

Route Topology::route_via(std::uint32_t src, std::uint32_t via, std::uint32_t dst, std::uint64_t tag) {
  if (via == src || via == dst) return route(src, dst, tag);
  const Cache::Key key{src, dst, tag, via};
  if (auto it = cache_->routes.find(key); it != cache_->routes.end()) return it->second;
  const Route a = route(src, via, tag);
  const Route b = route(via, dst, tag);
  Route r;
  r.offset = static_cast<std::uint32_t>(route_pool_.size());
  r.length = a.length + b.length;
  r.latency = a.latency + b.latency;
  for (std::uint32_t i = 0; i < a.length; ++i) route_pool_.push_back(route_pool_[a.offset + i]);
  for (std::uint32_t i = 0; i < b.length; ++i) route_pool_.push_back(route_pool_[b.offset + i]);
  cache_->routes.emplace(key, r);
  return r;
}

int Topology::bundled_spine_datacenter(const std::string& name) const {
  if (!facts_.bundled_spines()) return -1;
  for (int d = 0; d < num_dcs_; ++d) {
    const std::string dc = num_dcs_ > 1 ? " of datacenter " + std::to_string(d) : "";
    for (int s = 0; s < facts_.spines; ++s) {
      if (name == "spine " + std::to_string(s) + dc) return d;
    }
  }
  return -1;
}

bool Topology::route_has_choice(const Route& r) const {
  for (std::uint32_t l : links_of(r)) {
    const LinkKind k = links_[l].kind;
    if ((k == LinkKind::Uplink && facts_.spines > 1 && !facts_.bundled_spines()) ||
        (k == LinkKind::Wan && wan_links_ > 1)) {
      return true;
    }
  }
  return false;
}

int Topology::gpu_on_rail(int node, int rail) const {
  for (int g = first_gpu_of_node_[node]; g < first_gpu_of_node_[node + 1]; ++g) {
    if (rail_of_gpu_[g] == rail) return g;
  }
  return -1;
}

std::size_t Topology::cached_routes() const { return cache_->routes.size(); }

std::size_t Topology::cache_bytes() const {
  return cache_->dist_bytes + route_pool_.capacity() * sizeof(std::uint32_t) +
         cache_->routes.size() * (sizeof(Cache::Key) + sizeof(Route) + 2 * sizeof(void*));
}

}  // namespace trainsim
