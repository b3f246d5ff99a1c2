#include "sim/flow_collectives.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "sim/check.hpp"

namespace trainsim {

namespace {

std::vector<double> capacities(const Topology& t) {
  std::vector<double> c;
  c.reserve(t.num_links());
  for (const TopologyLink& l : t.links()) c.push_back(l.capacity);
  return c;
}

std::uint64_t channel_tag(std::uint64_t tag, int channel) { return tag * 1024 + static_cast<std::uint64_t>(channel); }

}  // namespace

// NCCL's binary tree (src/graph/trees.cc, ncclGetBtree): rooted at 0; a rank's
// parent clears its lowest set bit and sets the next one up (or only clears it
// when that is out of range), so odd ranks are leaves. The second tree is the
// first mirrored (rank r at position n-1-r) for even n and shifted by one for
// odd n (ncclGetDtree), which makes the leaves of one tree the interior of the other.
int double_binary_tree_parent(int nranks, int rank, int tree) {
  auto btree = [nranks](int r) {
    if (r == 0) return -1;
    int bit = 1;
    while (bit < nranks && (bit & r) == 0) bit <<= 1;
    const int up = (r ^ bit) | (bit << 1);
    return up < nranks ? up : (r ^ bit);
  };
  if (tree == 0) return btree(rank);
  if (nranks % 2 == 1) {
    const int up = btree((rank - 1 + nranks) % nranks);
    return up < 0 ? -1 : (up + 1) % nranks;
  }
  const int up = btree(nranks - 1 - rank);
  return up < 0 ? -1 : nranks - 1 - up;
}

FlowCollectives::FlowCollectives(const Cluster& cluster, Topology& topology,
                                 const std::vector<CalibrationProfile>& profiles, FlowOptions options)
    : cluster_(&cluster),
      topology_(&topology),
      profiles_(&profiles),
      analytical_(cluster, profiles),
      options_(options),
      network_(capacities(topology)) {}

FlowCollectives::Level FlowCollectives::level_of(const std::vector<int>& members) const {
  Level lv;
  lv.su_eff = lv.net_eff = lv.nvls_eff = std::numeric_limits<double>::max();
  double su_bw = std::numeric_limits<double>::max();
  bool nvls = true;
  for (int gpu : members) {
    const NodeSpec& node = cluster_->node_spec_of_gpu(gpu);
    const CalibrationProfile& p = (*profiles_)[cluster_->gpu_type_of(gpu)];
    if (node.scaleup_bandwidth * p.scaleup.busbw_efficiency.value < su_bw) {
      su_bw = node.scaleup_bandwidth * p.scaleup.busbw_efficiency.value;
      lv.su_curve = p.scaleup.busbw_curve.curve.empty() ? nullptr : &p.scaleup.busbw_curve.curve;
      lv.nvls_curve = p.scaleup.nvls_busbw_curve.curve.empty() ? nullptr : &p.scaleup.nvls_busbw_curve.curve;
      lv.p2p_curve = p.scaleup.p2p_curve.curve.empty() ? nullptr : &p.scaleup.p2p_curve.curve;
    }
    lv.su_eff = std::min(lv.su_eff, p.scaleup.busbw_efficiency.value);
    lv.net_eff = std::min(lv.net_eff, p.network.busbw_efficiency.value);
    if (!node.nvls || p.scaleup.nvls_busbw_efficiency.value <= 0) nvls = false;
    lv.nvls_eff = std::min(lv.nvls_eff, p.scaleup.nvls_busbw_efficiency.value);
    lv.su_lat = std::max(lv.su_lat, p.scaleup.latency.value);
    lv.net_lat = std::max(lv.net_lat, p.network.latency.value);
    lv.base = std::max(lv.base, p.scaleup.base_latency.value);
  }
  if (!nvls || members.empty()) lv.nvls_eff = 0;
  if (!(lv.su_eff > 0) || members.empty()) lv.su_eff = 1;
  if (!(lv.net_eff > 0) || members.empty()) lv.net_eff = 1;
  return lv;
}

FlowCollectives::Layout FlowCollectives::layout_of(const std::vector<int>& members) const {
  Layout lay;
  std::vector<int> nodes;  // domain of each group, in order of first appearance
  for (int gpu : members) {
    const int node = domain_of(gpu);
    std::size_t i = 0;
    while (i < nodes.size() && nodes[i] != node) ++i;
    if (i == nodes.size()) {
      nodes.push_back(node);
      lay.per_node.emplace_back();
    }
    lay.per_node[i].push_back(gpu);
  }
  lay.k = lay.per_node.empty() ? 0 : static_cast<int>(lay.per_node[0].size());
  for (const auto& g : lay.per_node) {
    if (static_cast<int>(g.size()) != lay.k) lay.k = 0;
  }
  return lay;
}

int FlowCollectives::domain_of(int gpu) const {
  const int node = cluster_->node_of(gpu);
  return topology_->switch_vertex(node) != kNoVertex ? node : cluster_->num_nodes() + gpu;
}

bool FlowCollectives::over_scaleup(int a, int b) const {
  const int node = cluster_->node_of(a);
  return node == cluster_->node_of(b) && topology_->switch_vertex(node) != kNoVertex;
}

void FlowCollectives::push_connection(CollectivePlan& p, PlannedFlow f, std::uint32_t via, std::uint64_t tag) {
  auto route = [&](std::uint64_t t) {
    return via == kNoVertex ? topology_->route(f.src, f.dst, t) : topology_->route_via(f.src, via, f.dst, t);
  };
  f.route = route(tag);
  const int qps = topology_->fabric().qps_per_connection;
  if (qps <= 1 || !topology_->route_has_choice(f.route)) {
    p.flows.push_back(f);
    return;
  }
  // NCCL_IB_QPS_PER_CONNECTION: the connection's data is split evenly over
  // its queue pairs, each a flow of its own that the switches hash apart.
  f.bytes /= qps;
  for (int q = 0; q < qps; ++q) {
    if (q > 0) f.route = route(tag + static_cast<std::uint64_t>(q) * 0x9E3779B97F4A7C15ull);
    p.flows.push_back(f);
  }
}

void FlowCollectives::add_flow(CollectivePlan& p, std::uint32_t src, std::uint32_t dst, double bytes, std::uint64_t tag,
                               double efficiency) {
  PlannedFlow f;
  f.src = src;
  f.dst = dst;
  f.bytes = bytes / efficiency;
  push_connection(p, f, kNoVertex, tag);
}

void FlowCollectives::add_gpu_flow(CollectivePlan& p, int src_gpu, int dst_gpu, double bytes, std::uint64_t tag,
                                   const Level& lv, double eff) {
  const bool local = over_scaleup(src_gpu, dst_gpu);
  if (eff <= 0) eff = local ? lv.su_eff : lv.net_eff;
  // PXN: on a rail-optimized fabric, traffic for another rail first crosses the
  // scale-up domain to the GPU on the destination's rail, then stays on that rail.
  const int rail = topology_->rail_of_gpu(dst_gpu);
  if (!local && topology_->fabric_kind() == FabricKind::RailOptimized && rail >= 0 &&
      topology_->rail_of_gpu(src_gpu) != rail && topology_->switch_vertex(cluster_->node_of(src_gpu)) != kNoVertex) {
    const int relay = topology_->gpu_on_rail(cluster_->node_of(src_gpu), rail);
    if (relay >= 0) {
      PlannedFlow f;
      f.src = topology_->gpu_vertex(src_gpu);
      f.dst = topology_->gpu_vertex(dst_gpu);
      f.bytes = bytes / eff;
      push_connection(p, f, topology_->gpu_vertex(relay), tag);
      return;
    }
  }
  add_flow(p, topology_->gpu_vertex(src_gpu), topology_->gpu_vertex(dst_gpu), bytes, tag, eff);
}

double FlowCollectives::max_alpha(const CollectivePlan& p, std::size_t first, const Level& lv) const {
  double a = 0;
  for (std::size_t i = first; i < p.flows.size(); ++i) {
    const PlannedFlow& f = p.flows[i];
    const TopologyVertex& s = topology_->vertex(f.src);
    const TopologyVertex& d = topology_->vertex(f.dst);
    const bool local = s.node >= 0 && s.node == d.node && topology_->switch_vertex(s.node) != kNoVertex;
    a = std::max(a, (local ? lv.su_lat : lv.net_lat) + f.route.latency);
  }
  return a;
}

void FlowCollectives::finish_phase(CollectivePlan& p, std::size_t first, double latency) const {
  const Time total = Time::seconds(std::max(0.0, latency));
  for (std::size_t i = first; i < p.flows.size(); ++i) {
    // The network adds the route's own latency after the drain.
    const Time own = Time::seconds(p.flows[i].route.latency);
    p.flows[i].latency = total > own ? total - own : Time{};
  }
  p.phase_end.push_back(static_cast<std::uint32_t>(p.flows.size()));
  p.phase_latency.push_back(total);
}

void FlowCollectives::ring_edges(const Layout& lay, const std::vector<int>& members, bool open,
                                 std::vector<std::array<int, 3>>& out) const {
  out.clear();
  const int nodes = static_cast<int>(lay.per_node.size());
  if (nodes == 1 || lay.k <= 1) {
    std::vector<int> order;
    if (nodes == 1) {
      order = members;
    } else {
      for (const auto& g : lay.per_node) order.insert(order.end(), g.begin(), g.end());
    }
    const int n = static_cast<int>(order.size());
    for (int i = 0; i < n; ++i) {
      if (open && i == n - 1) break;
      out.push_back({order[i], order[(i + 1) % n], 0});
    }
    return;
  }
  const int k = lay.k;
  for (int c = 0; c < k; ++c) {
    for (int j = 0; j < nodes; ++j) {
      const auto& g = lay.per_node[j];
      for (int i = 0; i + 1 < k; ++i) out.push_back({g[(c + i) % k], g[(c + i + 1) % k], c});
      if (open && j == nodes - 1) continue;
      out.push_back({g[c], lay.per_node[(j + 1) % nodes][c], c});
    }
  }
}

CollectivePlan FlowCollectives::plan_collective(const std::vector<int>& members, CollectiveKind kind, double bytes,
                                                std::uint64_t tag, FlowAlgorithm algorithm) {
  CollectivePlan p;
  const int n = static_cast<int>(members.size());
  if (n <= 1 || !(bytes > 0)) {
    finish_phase(p, 0, 0);
    return p;
  }
  const Level lv = level_of(members);
  const Layout lay = layout_of(members);
  const int nodes = static_cast<int>(lay.per_node.size());
  if (kind == CollectiveKind::AllReduce && algorithm == FlowAlgorithm::Auto) algorithm = options_.all_reduce;
  const CommShape shape = analytical_.shape(members);
  if (algorithm == FlowAlgorithm::Auto) {
    algorithm = choose_algorithm(shape, kind, bytes, options_.tree_bandwidth_factor).algorithm;
  }
  if (kind == CollectiveKind::AllToAll) algorithm = FlowAlgorithm::Pairwise;
  if (algorithm == FlowAlgorithm::DatacenterHierarchical &&
      algorithm_seconds(shape, kind, FlowAlgorithm::DatacenterHierarchical, bytes) >= 0) {
    p.algorithm = algorithm;
    plan_across_datacenters(p, members, kind, bytes, tag, lv);
    return p;
  }
  if (kind != CollectiveKind::AllReduce && kind != CollectiveKind::AllToAll) algorithm = FlowAlgorithm::Ring;
  // Unavailable choices fall back to the ring.
  const std::uint32_t sw = nodes == 1 ? topology_->switch_vertex(cluster_->node_of(members[0])) : kNoVertex;
  if (algorithm == FlowAlgorithm::Nvls && (nodes != 1 || lv.nvls_eff <= 0 || sw == kNoVertex)) {
    algorithm = FlowAlgorithm::Ring;
  }
  if ((algorithm == FlowAlgorithm::Tree || algorithm == FlowAlgorithm::Hierarchical) && (nodes == 1 || lay.k == 0)) {
    algorithm = FlowAlgorithm::Ring;
  }
  if (algorithm == FlowAlgorithm::Auto || algorithm == FlowAlgorithm::PointToPoint ||
      algorithm == FlowAlgorithm::DatacenterHierarchical) {
    algorithm = FlowAlgorithm::Ring;
  }
  p.algorithm = algorithm;
  // Inside one node a measured bus-bandwidth curve stands for efficiency and latency.
  const bool su_curve = nodes == 1 && lv.su_curve != nullptr;

  switch (algorithm) {
    case FlowAlgorithm::Ring: {
      std::vector<std::array<int, 3>> edges;
      ring_edges(lay, members, kind == CollectiveKind::Broadcast, edges);
      p.channels = nodes > 1 && lay.k > 1 ? lay.k : 1;
      const double per_edge = ring_factor(kind, n) * bytes / p.channels;
      const double eff = su_curve ? lv.su_curve->at(bytes) : 0.0;
      for (const auto& e : edges) add_gpu_flow(p, e[0], e[1], per_edge, channel_tag(tag, e[2]), lv, eff);
      const double lat = su_curve ? 0.0 : lv.base + ring_steps(kind, n) * max_alpha(p, 0, lv);
      finish_phase(p, 0, lat);
      break;
    }
    case FlowAlgorithm::Nvls: {
      const double f = ring_factor(kind, n) * bytes;
      const double eff = lv.nvls_curve != nullptr ? lv.nvls_curve->at(bytes) : lv.nvls_eff;
      for (int g : members) {
        add_flow(p, topology_->gpu_vertex(g), sw, f, tag, eff);
        add_flow(p, sw, topology_->gpu_vertex(g), f, tag, eff);
      }
      finish_phase(p, 0, lv.nvls_curve != nullptr ? 0.0 : lv.base + 2 * lv.su_lat);
      break;
    }
    case FlowAlgorithm::Tree: {
      const int k = lay.k, m = nodes;
      p.channels = k;
      const double half = bytes / (2.0 * k);
      for (int c = 0; c < k; ++c) {
        for (int t = 0; t < 2; ++t) {
          for (int node = 0; node < m; ++node) {
            const int up = double_binary_tree_parent(m, node, t);
            if (up < 0) continue;
            const int child = lay.per_node[node][c], parent = lay.per_node[up][c];
            add_gpu_flow(p, child, parent, half, channel_tag(tag, 2 * c + t), lv);
            add_gpu_flow(p, parent, child, half, channel_tag(tag, 2 * c + t), lv);
          }
        }
      }
      const double net_alpha = max_alpha(p, 0, lv);
      const std::size_t intra_first = p.flows.size();
      if (k > 1) {
        const double per_edge = 2.0 * (k - 1) / k * bytes;
        for (const auto& g : lay.per_node) {
          for (int i = 0; i < k; ++i) add_gpu_flow(p, g[i], g[(i + 1) % k], per_edge, tag, lv);
        }
      }
      const double su_alpha = k > 1 ? max_alpha(p, intra_first, lv) : 0.0;
      const double depth = std::ceil(std::log2(static_cast<double>(m)));
      finish_phase(p, 0, lv.base + 2 * depth * net_alpha + 2 * (k - 1) * su_alpha);
      break;
    }
    case FlowAlgorithm::Hierarchical: {
      const int k = lay.k, m = nodes;
      p.channels = k;
      auto intra = [&](double factor, double base) {
        const std::size_t first = p.flows.size();
        if (k > 1) {
          for (const auto& g : lay.per_node) {
            for (int i = 0; i < k; ++i) add_gpu_flow(p, g[i], g[(i + 1) % k], factor * bytes, tag, lv);
          }
        }
        finish_phase(p, first, base + (k - 1) * max_alpha(p, first, lv));
      };
      intra(static_cast<double>(k - 1) / k, lv.base);  // reduce-scatter
      const std::size_t first = p.flows.size();
      const double per_edge = 2.0 * (m - 1) / m * bytes / k;
      for (int l = 0; l < k; ++l) {
        for (int j = 0; j < m; ++j) {
          add_gpu_flow(p, lay.per_node[j][l], lay.per_node[(j + 1) % m][l], per_edge, channel_tag(tag, l), lv);
        }
      }
      finish_phase(p, first, 2 * (m - 1) * max_alpha(p, first, lv));
      intra(static_cast<double>(k - 1) / k, 0.0);  // all-gather
      break;
    }
    case FlowAlgorithm::Pairwise: {
      // Inside one domain the measured curve sets the pairs' efficiency and
      // holds the latency, as the analytical all-to-all there reads it.
      const double each = bytes / n;
      const double eff = su_curve ? lv.su_curve->at(bytes) : 0.0;
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
          if (i != j) add_gpu_flow(p, members[i], members[j], each, tag, lv, eff);
        }
      }
      finish_phase(p, 0, su_curve ? 0.0 : lv.base + (n - 1) * max_alpha(p, 0, lv));
      break;
    }
    case FlowAlgorithm::Auto:
    case FlowAlgorithm::PointToPoint:
    case FlowAlgorithm::DatacenterHierarchical:
      break;
  }
  return p;
}

void FlowCollectives::plan_across_datacenters(CollectivePlan& p, const std::vector<int>& members, CollectiveKind kind,
                                              double bytes, std::uint64_t tag, const Level& lv) {
  // Members grouped by datacenter, datacenters in order of first appearance;
  // the caller checked that every datacenter holds the same number of them.
  std::vector<int> dcs;
  std::vector<std::vector<int>> per_dc;
  for (int gpu : members) {
    const int dc = topology_->datacenter_of_node(cluster_->node_of(gpu));
    std::size_t i = 0;
    while (i < dcs.size() && dcs[i] != dc) ++i;
    if (i == dcs.size()) {
      dcs.push_back(dc);
      per_dc.emplace_back();
    }
    per_dc[i].push_back(gpu);
  }
  const int d = static_cast<int>(per_dc.size());
  const int m = static_cast<int>(per_dc[0].size());
  // Every datacenter's part at once, as one phase.
  auto inside = [&](CollectiveKind k) {
    if (m <= 1) return;
    const std::size_t first = p.flows.size();
    double latency = 0;
    for (int i = 0; i < d; ++i) {
      const CollectivePlan part = plan_collective(per_dc[i], k, bytes, channel_tag(tag, 512 + i), FlowAlgorithm::Ring);
      p.flows.insert(p.flows.end(), part.flows.begin(), part.flows.end());
      for (const Time t : part.phase_latency) latency = std::max(latency, t.to_seconds());
    }
    finish_phase(p, first, latency);
  };
  // A ring over the datacenters per member index, each carrying its shard.
  auto across = [&](CollectiveKind k) {
    const std::size_t first = p.flows.size();
    const double per_edge = ring_factor(k, d) * bytes / m;
    for (int j = 0; j < m; ++j) {
      for (int i = 0; i < d; ++i) {
        add_gpu_flow(p, per_dc[i][j], per_dc[(i + 1) % d][j], per_edge, channel_tag(tag, j), lv);
      }
    }
    finish_phase(p, first, lv.base + ring_steps(k, d) * max_alpha(p, first, lv));
  };
  switch (kind) {
    case CollectiveKind::AllReduce:
      inside(CollectiveKind::ReduceScatter);
      across(CollectiveKind::AllReduce);
      inside(CollectiveKind::AllGather);
      break;
    case CollectiveKind::AllGather:
      across(CollectiveKind::AllGather);
      inside(CollectiveKind::AllGather);
      break;
    case CollectiveKind::ReduceScatter:
      inside(CollectiveKind::ReduceScatter);
      across(CollectiveKind::ReduceScatter);
      break;
    case CollectiveKind::AllToAll:
    case CollectiveKind::Broadcast:
      break;
  }
}

CollectivePlan FlowCollectives::plan_p2p(int src_gpu, int dst_gpu, double bytes, std::uint64_t tag) {
  CollectivePlan p;
  p.algorithm = FlowAlgorithm::PointToPoint;
  const std::vector<int> pair{src_gpu, dst_gpu};
  const Level lv = level_of(pair);
  if (src_gpu == dst_gpu) {
    finish_phase(p, 0, lv.base);
    return p;
  }
  // Inside a domain a measured send/recv curve sets the flow's efficiency (it
  // contains the latency, as in the analytical model).
  if (lv.p2p_curve != nullptr && over_scaleup(src_gpu, dst_gpu)) {
    add_gpu_flow(p, src_gpu, dst_gpu, bytes, tag, lv, lv.p2p_curve->at(bytes));
    finish_phase(p, 0, 0);
    return p;
  }
  add_gpu_flow(p, src_gpu, dst_gpu, bytes, tag, lv);
  finish_phase(p, 0, lv.base + max_alpha(p, 0, lv));
  return p;
}

CollectivePlan FlowCollectives::plan_all_to_all_v(const std::vector<int>& members, std::span<const double> bytes,
                                                  std::uint64_t tag) {
  const std::size_t n = members.size();
  TRAINSIM_CHECK(bytes.size() == n * n, "all-to-all-v over " + std::to_string(n) + " members got " +
                                            std::to_string(bytes.size()) + " sizes, expected n*n");
  CollectivePlan p;
  p.algorithm = FlowAlgorithm::Pairwise;
  const Level lv = level_of(members);
  // Inside one domain, as the analytical model: the measured curve at the
  // uniform buffer that loads a member as much as the busiest one is loaded
  // (n-1 of its n shares leave it) sets the efficiency and holds the latency.
  const bool su_curve = n > 1 && lv.su_curve != nullptr && layout_of(members).per_node.size() == 1;
  double eff = 0.0;
  if (su_curve) {
    double busiest = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double out = 0, in = 0;
      for (std::size_t j = 0; j < n; ++j) {
        if (j == i) continue;
        out += std::max(0.0, bytes[i * n + j]);
        in += std::max(0.0, bytes[j * n + i]);
      }
      busiest = std::max({busiest, out, in});
    }
    eff = lv.su_curve->at(busiest * static_cast<double>(n) / (static_cast<double>(n) - 1));
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i != j && bytes[i * n + j] > 0) add_gpu_flow(p, members[i], members[j], bytes[i * n + j], tag, lv, eff);
    }
  }
  const double lat = p.flows.empty() || su_curve ? 0.0 : lv.base + (static_cast<double>(n) - 1) * max_alpha(p, 0, lv);
  finish_phase(p, 0, lat);
  return p;
}

PlanId FlowCollectives::add_plan(CollectivePlan plan) {
  plans_.push_back(std::move(plan));
  return static_cast<PlanId>(plans_.size() - 1);
}

void FlowCollectives::start_phase(Time now, std::uint32_t r) {
  const Running& run = running_[r];
  const CollectivePlan& p = plans_[run.plan];
  const std::uint32_t first = run.phase == 0 ? 0 : p.phase_end[run.phase - 1];
  const std::uint32_t last = p.phase_end[run.phase];
  specs_.clear();
  for (std::uint32_t i = first; i < last; ++i) {
    const PlannedFlow& f = p.flows[i];
    specs_.push_back(FlowSpec{topology_->links_of(f.route), f.bytes, f.latency + Time::seconds(f.route.latency)});
  }
  network_.start(now, specs_, r, p.phase_latency[run.phase]);
}

void FlowCollectives::start(Time now, PlanId plan, std::uint64_t cookie) {
  std::uint32_t r;
  if (!free_running_.empty()) {
    r = free_running_.back();
    free_running_.pop_back();
  } else {
    running_.emplace_back();
    r = static_cast<std::uint32_t>(running_.size() - 1);
  }
  running_[r] = Running{plan, 0, cookie, true};
  start_phase(now, r);
}

void FlowCollectives::advance(Time now, std::vector<TransferDone>& done) {
  for (;;) {
    const Time t = network_.next_event();
    if (t > now || t == Time::max()) break;
    step_done_.clear();
    network_.advance(t, step_done_);
    for (const TransferDone& d : step_done_) {
      const auto r = static_cast<std::uint32_t>(d.cookie);
      Running& run = running_[r];
      if (run.phase + 1 < plans_[run.plan].phases()) {
        ++run.phase;
        start_phase(d.time, r);
        continue;
      }
      done.push_back(TransferDone{d.id, run.cookie, d.time});
      run.active = false;
      free_running_.push_back(r);
    }
  }
}

Time FlowCollectives::measure(const CollectivePlan& plan) {
  TRAINSIM_CHECK(network_.active_transfers() == 0, "measure() needs an idle flow network");
  plans_.push_back(plan);
  const auto id = static_cast<PlanId>(plans_.size() - 1);
  std::vector<TransferDone> done;
  // Runs on the network's own clock: start after everything so far.
  const Time t0 = network_.now();
  start(t0, id, 0);
  while (done.empty()) {
    const Time t = next_event();
    if (t == Time::max()) break;
    advance(t, done);
  }
  plans_.pop_back();
  return done.empty() ? Time::max() : done.front().time - t0;
}

}  // namespace trainsim
