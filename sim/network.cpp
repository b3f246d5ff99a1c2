#include "sim/network.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "sim/check.hpp"

namespace trainsim {

namespace {

// Pairs of at most `capacity` elements, on the stack up to 16: most shapes are
// of 2 to 8 members (TP groups, pipeline links) and a plan takes thousands.
class PairList {
 public:
  explicit PairList(std::size_t capacity) {
    if (capacity > small_.size()) {
      big_.resize(capacity);
      data_ = big_.data();
    }
  }
  PairList(const PairList&) = delete;
  PairList& operator=(const PairList&) = delete;
  void emplace_back(int a, int b) { data_[size_++] = {a, b}; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::pair<int, int>& operator[](std::size_t i) { return data_[i]; }
  std::pair<int, int>& front() { return data_[0]; }
  std::pair<int, int>& back() { return data_[size_ - 1]; }
  std::pair<int, int>* begin() { return data_; }
  std::pair<int, int>* end() { return data_ + size_; }
  // Sorted ascending; members in id order (a DP communicator of thousands)
  // give their pairs in order already, which one pass finds.
  void sort() {
    if (!std::is_sorted(begin(), end())) std::sort(begin(), end());
  }

 private:
  std::array<std::pair<int, int>, 16> small_;
  std::vector<std::pair<int, int>> big_;
  std::pair<int, int>* data_ = small_.data();
  std::size_t size_ = 0;
};

std::string gbps_text(double bytes_per_s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g GB/s", bytes_per_s / 1e9);
  return buf;
}

// Links crossed between two NICs: NIC-leaf-NIC, or via a spine NIC-leaf-spine-leaf-NIC.
constexpr int kLeafPathLinks = 2;
constexpr int kSpinePathLinks = 4;
// Across datacenters: NIC-leaf-spine-gateway, the WAN link, gateway-spine-leaf-NIC.
constexpr int kWanPathFabricLinks = 6;

bool has_scaleup(const NodeSpec& node) { return node.gpus_per_node > 1 && node.scaleup != ScaleupKind::None; }

}  // namespace

std::vector<std::string> analytical_limitations(const Cluster& cluster) {
  std::vector<std::string> out;
  const ClusterSpec& spec = cluster.spec();
  const FabricFacts facts = fabric_facts(spec);
  if (facts.spines > 0 && facts.oversubscription > 1.0) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "fabric oversubscription %.3g:1: the analytical model limits each flow crossing a leaf uplink to "
                  "%s, but cannot model several communicators sharing the uplinks; "
                  "use --fidelity flow for that contention",
                  facts.oversubscription,
                  facts.routing == FabricRouting::Adaptive ? "its share of the leaf's up-links (adaptive routing)"
                                                           : "one uplink's capacity");
    out.emplace_back(buf);
  }
  if (facts.datacenters > 1) {
    const int gpus_per_dc = cluster.num_gpus() / facts.datacenters;
    const int links = spec.datacenters.wan_links;
    const std::string parallel_links = links > 1 ? " x " + std::to_string(links) + " parallel links" : "";
    out.push_back("WAN between " + std::to_string(facts.datacenters) +
                  " datacenters: the analytical model gives every " + "GPU an even share of " +
                  (links > 1 ? "the parallel WAN links to a site" : "a WAN link") + " (" +
                  gbps_text(spec.datacenters.wan_bandwidth * links / std::max(1, gpus_per_dc)) + " = " +
                  gbps_text(spec.datacenters.wan_bandwidth) + parallel_links + " / " + std::to_string(gpus_per_dc) +
                  " GPUs), as if all of them crossed it at once; use --fidelity flow for the actual sharing");
  }
  return out;
}

AnalyticalNetwork::AnalyticalNetwork(const Cluster& cluster, const std::vector<CalibrationProfile>& profiles)
    : cluster_(&cluster), profiles_(&profiles), fabric_(fabric_facts(cluster.spec())) {
  gpus_in_datacenter_.assign(fabric_.datacenters, 0);
  if (const int per_node = cluster.uniform_gpus_per_node(); per_node > 0) {
    // One node size: node n's first GPU is n x per_node (rail_of), and the
    // datacenters hold nodes_per_datacenter nodes each, the last the rest
    // (FabricFacts::datacenter_of).
    const long nodes = cluster.num_nodes(), per_dc = fabric_.nodes_per_datacenter;
    for (int dc = 0; dc < fabric_.datacenters; ++dc) {
      const long first = dc * per_dc;
      const long count = dc + 1 == fabric_.datacenters ? nodes - first : std::min(per_dc, nodes - first);
      gpus_in_datacenter_[dc] = static_cast<int>(std::max(0L, count) * per_node);
    }
  } else {
    first_gpu_of_node_.resize(cluster.num_nodes());
    // A node's GPUs have consecutive ids (Cluster): node by node, GPU l of its
    // node. The datacenter of a node (FabricFacts::datacenter_of) is counted
    // along instead of divided out.
    for (int node = 0, g = 0, dc = 0, in_dc = 0; node < cluster.num_nodes(); ++node) {
      const NodeSpec& ns = cluster.node_spec(node);
      gpus_in_datacenter_[std::min(fabric_.datacenters - 1, dc)] += ns.gpus_per_node;
      first_gpu_of_node_[node] = g;
      g += ns.gpus_per_node;
      if (++in_dc == fabric_.nodes_per_datacenter) in_dc = 0, ++dc;
    }
  }
  if (fabric_.spines > 0) {
    // uplink_capacity() of every leaf in one pass over the nodes (the same sums
    // in the same node order), instead of a pass over a leaf per member and shape.
    const bool rail_optimized = fabric_.kind == FabricKind::RailOptimized;
    leaf_groups_ = (fabric_.nodes_per_datacenter + fabric_.nodes_per_leaf - 1) / fabric_.nodes_per_leaf;
    leaf_rails_ = 1;
    if (rail_optimized) {
      for (const NodeGroup& g : cluster.spec().groups) {
        if (g.count > 0) leaf_rails_ = std::max(leaf_rails_, g.node.nic_count);
      }
    }
    const std::size_t leaves = static_cast<std::size_t>(fabric_.datacenters) * leaf_groups_;
    const auto rails = static_cast<std::size_t>(leaf_rails_);
    leaf_uplink_.assign(leaves * rails, 0.0);
    const int covered = std::min(cluster.num_nodes(), fabric_.datacenters * fabric_.nodes_per_datacenter);
    // Leaf by leaf (FabricFacts::datacenter_of, leaf_group_of: consecutive
    // nodes), each leaf's capacity and ports summed over its nodes in node
    // order, then its uplinks. With one node kind, a leaf of as many nodes as
    // the last one summed has its uplinks: the same operations in the same
    // order (a million GPUs: 4,096 leaves alike). A leaf left without nodes
    // keeps uplinks of 0.
    const bool one_kind = cluster.spec().groups.size() == 1;
    std::size_t summed_leaf = 0;
    int summed_nodes = -1;
    std::vector<double> cap(rails);
    std::vector<int> ports(rails);
    bool empty_leaf = false;  // a leaf without nodes
    for (int dc = 0; dc < fabric_.datacenters; ++dc) {
      for (int group = 0; group < leaf_groups_; ++group) {
        const int first = dc * fabric_.nodes_per_datacenter + group * fabric_.nodes_per_leaf;
        const int last = std::min({first + fabric_.nodes_per_leaf, (dc + 1) * fabric_.nodes_per_datacenter, covered});
        if (first >= last) {
          empty_leaf = true;
          continue;
        }
        const std::size_t leaf = static_cast<std::size_t>(dc) * leaf_groups_ + group;
        double* uplinks = leaf_uplink_.data() + leaf * rails;
        if (one_kind && last - first == summed_nodes) {
          std::copy_n(leaf_uplink_.data() + summed_leaf * rails, rails, uplinks);
          continue;
        }
        std::fill(cap.begin(), cap.end(), 0.0);
        std::fill(ports.begin(), ports.end(), 0);
        for (int n = first; n < last; ++n) {
          const NodeSpec& ns = cluster.node_spec(n);
          for (int r = 0; r < leaf_rails_; ++r) {
            const int nics = rail_optimized ? (r < ns.nic_count ? 1 : 0) : ns.nic_count;
            cap[r] += ns.nic_bandwidth * nics;
            ports[r] += nics;
          }
        }
        for (std::size_t r = 0; r < rails; ++r) {
          if (ports[r] == 0) continue;
          const double c = cap[r] * (static_cast<double>(fabric_.leaf_ports) / ports[r]);
          uplinks[r] = c / fabric_.oversubscription / fabric_.spines;
        }
        // Every entry equal: a copied leaf equals the one it copies.
        for (std::size_t r = 0; r < rails; ++r)
          uniform_uplinks_ = uniform_uplinks_ && uplinks[r] == leaf_uplink_.front();
        summed_leaf = leaf;
        summed_nodes = last - first;
      }
    }
    if (empty_leaf) {
      for (double u : leaf_uplink_) uniform_uplinks_ = uniform_uplinks_ && u == leaf_uplink_.front();
    }
  }
}

int AnalyticalNetwork::rail_of(int gpu) const {
  const int node = cluster_->node_of(gpu);
  const NodeSpec& ns = cluster_->node_spec(node);
  if (ns.nic_count <= 0) return -1;
  const int per_node = cluster_->uniform_gpus_per_node();
  const int first = per_node > 0 ? node * per_node : first_gpu_of_node_[node];
  return (gpu - first) * ns.nic_count / std::max(1, ns.gpus_per_node);
}

int AnalyticalNetwork::shift_period() const {
  // shape() reads of a member its node's spec, its GPU type, datacenter, rail
  // and leaf (through leaf_uplink_ and the pattern of leaves): with one node
  // kind, one GPU type and one datacenter, a shift by whole leaves keeps every
  // rail and maps nodes to nodes and leaves to leaves one to one.
  const bool degraded =
      !scaleup_factor_.empty() || !nic_factor_.empty() || !uplink_factor_.empty() || !wan_factor_.empty();
  if (degraded || !uniform_uplinks_ || fabric_.datacenters != 1 || cluster_->spec().groups.size() != 1 ||
      cluster_->num_gpu_types() != 1) {
    return 0;
  }
  return cluster_->node_spec(0).gpus_per_node * fabric_.nodes_per_leaf;
}

bool AnalyticalNetwork::shape_reads_nodes_only() const {
  // Without scale-up links a GPU is its own domain and its rail decides whether
  // two GPUs of a node meet under one leaf (bare_rail in shape()).
  return shift_period() > 0 && has_scaleup(cluster_->node_spec(0));
}

void AnalyticalNetwork::degrade_link(const TopologyVertex& a, const TopologyVertex& b, LinkKind kind, double factor) {
  {
    const std::lock_guard<std::mutex> lock(memo_mutex_);
    memo_.clear();  // shapes read the links' capacities
  }
  auto lower = [factor](std::vector<double>& v, std::size_t size, std::size_t i) {
    if (v.empty()) v.assign(size, 1.0);
    v[i] = std::min(v[i], factor);
  };
  const auto gpus = static_cast<std::size_t>(cluster_->num_gpus());
  const TopologyVertex& gpu = a.kind == VertexKind::Gpu ? a : b;
  const TopologyVertex& nic = a.kind == VertexKind::Nic ? a : b;
  const TopologyVertex& leaf = a.kind == VertexKind::Leaf ? a : b;
  switch (kind) {
    case LinkKind::ScaleUp:
      lower(scaleup_factor_, gpus, static_cast<std::size_t>(gpu.index));
      break;
    case LinkKind::GpuNic:
      lower(nic_factor_, gpus, static_cast<std::size_t>(gpu.index));
      break;
    case LinkKind::Access:
      // Every GPU of the node that sends through this NIC.
      for (int g = 0; g < cluster_->num_gpus(); ++g) {
        if (cluster_->node_of(g) == nic.node && rail_of(g) == nic.index) lower(nic_factor_, gpus, g);
      }
      break;
    case LinkKind::Uplink:
      if (!leaf_uplink_.empty()) {
        const std::size_t li = (static_cast<std::size_t>(leaf.datacenter) * leaf_groups_ + leaf.group) * leaf_rails_ +
                               std::max(0, leaf.index);
        if (fabric_.bundled_spines()) {
          // One bundle of the leaf's up-links: the capacities lost on its
          // links add up (`factor` is of the whole bundle).
          if (uplink_factor_.empty()) uplink_factor_.assign(leaf_uplink_.size(), 1.0);
          uplink_factor_[li] = std::max(0.0, uplink_factor_[li] - (1.0 - factor));
        } else {
          lower(uplink_factor_, leaf_uplink_.size(), li);
        }
      }
      break;
    case LinkKind::DcEdge:
    case LinkKind::Wan:
      lower(wan_factor_, static_cast<std::size_t>(fabric_.datacenters), static_cast<std::size_t>(a.datacenter));
      lower(wan_factor_, static_cast<std::size_t>(fabric_.datacenters), static_cast<std::size_t>(b.datacenter));
      break;
  }
}

CommShape AnalyticalNetwork::shape(const std::vector<int>& members) const {
  if (members.size() < kMemoMembers) return compute_shape(members);
  {
    const std::lock_guard<std::mutex> lock(memo_mutex_);
    for (const auto& [known, shape] : memo_) {
      if (known == members) return shape;
    }
  }
  const CommShape s = compute_shape(members);
  const std::lock_guard<std::mutex> lock(memo_mutex_);
  memo_.emplace_back(members, s);
  return s;
}

CommShape AnalyticalNetwork::compute_shape(const std::vector<int>& members) const {
  CommShape s;
  s.size = static_cast<int>(members.size());
  constexpr double kNone = std::numeric_limits<double>::max();
  s.scaleup_bw = s.network_bw = s.nvls_bw = s.wan_bw = kNone;
  bool all_nvls = true;
  double uplink = kNone;  // smallest leaf-spine link above the members, before efficiency
  double net_eff = kNone;
  // Per member, sorted and counted after the loop (flat arrays rather than
  // maps and sets: a shape is taken for every communicator of a plan).
  PairList dc_domain(members.size());  // (datacenter, scale-up domain)
  PairList dc_leaf(members.size());    // (datacenter, leaf group of the member's node)
  PairList bare_rail(members.size());  // (node without scale-up links, rail of the member)
  // What a member contributes through its node's kind, its GPU type and its
  // links' factors, and what through where it sits (datacenter, node, leaf,
  // rail). With one node kind, one GPU type and no per-GPU factor the first is
  // the same for every member: taken once, it gives the same minima and maxima.
  auto links_of = [&](int gpu, const NodeSpec& ns) {
    const CalibrationProfile& p = (*profiles_)[cluster_->gpu_type_of(gpu)];
    const double scaleup_link =
        scaleup_factor_.empty() ? ns.scaleup_bandwidth : ns.scaleup_bandwidth * scaleup_factor_[gpu];
    const double nic_per_gpu =
        nic_factor_.empty() ? ns.nic_bandwidth_per_gpu() : ns.nic_bandwidth_per_gpu() * nic_factor_[gpu];
    if (has_scaleup(ns)) {
      const double eff_bw = scaleup_link * p.scaleup.busbw_efficiency.value;
      if (eff_bw < s.scaleup_bw) {
        s.scaleup_link_bw = scaleup_link;
        s.scaleup_curve = p.scaleup.busbw_curve.curve.empty() ? nullptr : &p.scaleup.busbw_curve.curve;
        s.nvls_curve = p.scaleup.nvls_busbw_curve.curve.empty() ? nullptr : &p.scaleup.nvls_busbw_curve.curve;
        s.p2p_curve = p.scaleup.p2p_curve.curve.empty() ? nullptr : &p.scaleup.p2p_curve.curve;
      }
      s.scaleup_bw = std::min(s.scaleup_bw, eff_bw);
    }
    const double nvls_eff = p.scaleup.nvls_busbw_efficiency.value;
    if (!ns.nvls || nvls_eff <= 0 || !has_scaleup(ns)) all_nvls = false;
    s.nvls_bw = std::min(s.nvls_bw, scaleup_link * nvls_eff);
    net_eff = std::min(net_eff, p.network.busbw_efficiency.value);
    s.network_bw = std::min(s.network_bw, nic_per_gpu * p.network.busbw_efficiency.value);
    s.scaleup_latency = std::max(s.scaleup_latency, p.scaleup.latency.value);
    s.network_latency = std::max(s.network_latency, p.network.latency.value);
    s.base_latency = std::max(s.base_latency, p.scaleup.base_latency.value);
    return std::pair<double, double>{nic_per_gpu, p.network.busbw_efficiency.value};
  };
  auto place = [&](int gpu, int node, const NodeSpec& ns, double nic_per_gpu, double busbw_eff) {
    const int dc = std::min(fabric_.datacenters - 1, fabric_.datacenter_of(node));
    // A node without scale-up links: every GPU is its own domain and talks to
    // the others through the NICs (docs/network.md, "Scale-up kind none").
    const int domain = has_scaleup(ns) ? node : cluster_->num_nodes() + gpu;
    dc_domain.emplace_back(dc, domain);
    dc_leaf.emplace_back(dc, fabric_.leaf_group_of(node));
    const int rail = rail_of(gpu);
    if (!has_scaleup(ns) && ns.gpus_per_node > 1) bare_rail.emplace_back(node, rail);
    if (fabric_.spines > 0) {
      const int leaf_rail = fabric_.kind == FabricKind::RailOptimized ? std::max(0, rail) : -1;
      const std::size_t li = (static_cast<std::size_t>(dc) * leaf_groups_ + fabric_.leaf_group_of(node)) * leaf_rails_ +
                             std::max(0, leaf_rail);
      const double cap = uplink_factor_.empty() ? leaf_uplink_[li] : leaf_uplink_[li] * uplink_factor_[li];
      if (cap > 0) uplink = std::min(uplink, cap);
    }
    if (fabric_.datacenters > 1) {
      const DatacenterSpec& dcs = cluster_->spec().datacenters;
      double share = dcs.wan_bandwidth * dcs.wan_links / std::max(1, gpus_in_datacenter_[dc]);
      if (!wan_factor_.empty()) share *= wan_factor_[dc];
      s.wan_bw = std::min(s.wan_bw, std::min(nic_per_gpu, share) * busbw_eff);
    }
  };
  if (!members.empty() && cluster_->spec().groups.size() == 1 && cluster_->num_gpu_types() == 1 &&
      scaleup_factor_.empty() && nic_factor_.empty()) {
    const NodeSpec& ns = cluster_->node_spec(0);
    const auto [nic_per_gpu, busbw_eff] = links_of(members.front(), ns);
    for (int gpu : members) place(gpu, cluster_->node_of(gpu), ns, nic_per_gpu, busbw_eff);
  } else {
    for (int gpu : members) {
      const int node = cluster_->node_of(gpu);
      const NodeSpec& ns = cluster_->node_spec(node);
      const auto [nic_per_gpu, busbw_eff] = links_of(gpu, ns);
      place(gpu, node, ns, nic_per_gpu, busbw_eff);
    }
  }
  // Members per domain (a domain lies in one datacenter), members and domains per datacenter.
  dc_domain.sort();
  PairList per_dc(members.size());  // (datacenter, members), datacenters ascending
  int domains = 0;
  for (std::size_t i = 0; i < dc_domain.size();) {
    std::size_t j = i;
    while (j < dc_domain.size() && dc_domain[j] == dc_domain[i]) ++j;
    const int count = static_cast<int>(j - i);
    ++domains;
    s.max_per_node = std::max(s.max_per_node, count);
    if (per_dc.empty() || per_dc.back().first != dc_domain[i].first) per_dc.emplace_back(dc_domain[i].first, 0);
    per_dc.back().second += count;
    i = j;
  }
  for (std::size_t i = 0; i < dc_domain.size();) {
    std::size_t j = i;
    while (j < dc_domain.size() && dc_domain[j] == dc_domain[i]) ++j;
    s.uniform_per_node &= static_cast<int>(j - i) == s.max_per_node;
    i = j;
  }
  if (!all_nvls || domains != 1) s.nvls_bw = 0;
  if (s.scaleup_bw == kNone) s.scaleup_bw = 0;
  if (s.nvls_bw == kNone) s.nvls_bw = 0;
  if (s.network_bw == kNone) s.network_bw = 0;
  s.nodes = domains;

  // Leaf uplinks: a channel between domains under different leaves of one
  // datacenter crosses an uplink; alone on the network it gets one uplink
  // under ECMP (which spreads a fat-tree node's channels over the spines),
  // its share of all the leaf's up-links under adaptive routing.
  bool spans_leaves = false;
  dc_leaf.sort();
  for (std::size_t i = 1; i < dc_leaf.size(); ++i) {
    spans_leaves |= dc_leaf[i].first == dc_leaf[i - 1].first && dc_leaf[i].second != dc_leaf[i - 1].second;
  }
  if (fabric_.kind == FabricKind::RailOptimized) {
    bare_rail.sort();
    for (std::size_t i = 1; i < bare_rail.size(); ++i) {
      spans_leaves |= bare_rail[i].first == bare_rail[i - 1].first && bare_rail[i].second != bare_rail[i - 1].second;
    }
  }
  double uplink_per_channel = kNone;
  if (uplink != kNone) {
    const double channels_per_leaf = fabric_.kind == FabricKind::FatTree ? s.max_per_node : 1.0;
    const double spines_per_channel = fabric_.spines / channels_per_leaf;
    uplink_per_channel =
        uplink * (fabric_.routing == FabricRouting::Adaptive ? spines_per_channel : std::min(1.0, spines_per_channel));
  }
  if (spans_leaves && uplink_per_channel != kNone) {
    s.network_bw = std::min(s.network_bw, uplink_per_channel * net_eff);
  }
  s.network_latency += (spans_leaves ? kSpinePathLinks : kLeafPathLinks) * fabric_.link_latency;

  // Datacenters: the WAN path's latency, and its share of the WAN per GPU.
  s.datacenters = static_cast<int>(per_dc.size());
  s.per_dc_size = per_dc.empty() ? 0 : per_dc.front().second;
  for (const auto& [dc, count] : per_dc) {
    if (count != s.per_dc_size) s.per_dc_size = 0;
  }
  for (std::size_t i = 0; i < dc_domain.size();) {
    // Distinct domains of the datacenter dc_domain[i].first.
    int dc_domains = 0;
    std::size_t j = i;
    while (j < dc_domain.size() && dc_domain[j].first == dc_domain[i].first) {
      if (j == i || dc_domain[j].second != dc_domain[j - 1].second) ++dc_domains;
      ++j;
    }
    s.per_dc_nodes = std::max(s.per_dc_nodes, dc_domains);
    i = j;
  }
  if (s.datacenters > 1) {
    if (uplink_per_channel != kNone) s.wan_bw = std::min(s.wan_bw, uplink_per_channel * net_eff);
    s.wan_latency = s.network_latency - (spans_leaves ? kSpinePathLinks : kLeafPathLinks) * fabric_.link_latency +
                    kWanPathFabricLinks * fabric_.link_latency + cluster_->spec().datacenters.wan_latency;
  } else {
    s.wan_bw = 0;
  }
  return s;
}

double AnalyticalNetwork::collective_seconds(const CommShape& s, CollectiveKind kind, double bytes) const {
  return choose_algorithm(s, kind, bytes).seconds;
}

double AnalyticalNetwork::all_to_all_v_seconds(const CommShape& s, const std::vector<int>& members,
                                               std::span<const double> bytes) const {
  const std::size_t n = members.size();
  TRAINSIM_CHECK(bytes.size() == n * n, "all-to-all-v over " + std::to_string(n) + " members got " +
                                            std::to_string(bytes.size()) + " sizes, expected n*n");
  // Domain, datacenter and NIC port of each member, as shape() counts them.
  // On a rail-optimized fabric a message to another domain leaves through the
  // NIC of the destination's rail (PXN relays it over scale-up first) and
  // arrives through the destination's: the network load is counted per
  // (domain, rail) NIC, shared by the GPUs on that rail.
  const bool pxn = fabric_.kind == FabricKind::RailOptimized;
  std::vector<int> domain(n), dc(n), port(n);
  std::vector<double> sharing(n, 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    const int node = cluster_->node_of(members[i]);
    const NodeSpec& ns = cluster_->node_spec(node);
    const bool su = has_scaleup(ns);
    domain[i] = su ? node : cluster_->num_nodes() + members[i];
    dc[i] = std::min(fabric_.datacenters - 1, fabric_.datacenter_of(node));
    port[i] = static_cast<int>(i);
    if (pxn && su && rail_of(members[i]) >= 0) {
      port[i] = -1 - (domain[i] * std::max(1, ns.nic_count) + rail_of(members[i]));  // negative: a NIC port
      sharing[i] = static_cast<double>(ns.gpus_per_node) / std::max(1, ns.nic_count);
    }
  }
  std::vector<AllToAllVLoad> send(n), recv(n);
  std::map<int, std::pair<double, double>> nic;  // NIC port -> (bytes out, bytes in), per GPU sharing it
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const double b = bytes[i * n + j];
      if (i == j || !(b > 0)) continue;
      if (domain[i] == domain[j]) {
        send[i].scaleup += b;
        recv[j].scaleup += b;
      } else if (port[i] < 0 && port[j] < 0) {
        // Out through the NIC of j's rail in i's domain, in through j's.
        const int out = -1 - (domain[i] * std::max(1, cluster_->node_spec(cluster_->node_of(members[i])).nic_count) +
                              rail_of(members[j]));
        nic[out].first += b / sharing[j];
        nic[port[j]].second += b / sharing[j];
      } else {
        send[i].network += b;
        recv[j].network += b;
      }
      if (dc[i] != dc[j]) {
        send[i].wan += b;
        recv[j].wan += b;
      }
    }
  }
  AllToAllVLoad busiest;
  for (std::size_t i = 0; i < n; ++i) {
    for (const AllToAllVLoad* l : {&send[i], &recv[i]}) {
      busiest.scaleup = std::max(busiest.scaleup, l->scaleup);
      busiest.network = std::max(busiest.network, l->network);
      busiest.wan = std::max(busiest.wan, l->wan);
    }
  }
  for (const auto& [p, load] : nic) busiest.network = std::max({busiest.network, load.first, load.second});
  return trainsim::all_to_all_v_seconds(s, busiest);
}

double AnalyticalNetwork::p2p_seconds(const CommShape& s, double bytes) const {
  return trainsim::p2p_seconds(s, bytes);
}

}  // namespace trainsim
