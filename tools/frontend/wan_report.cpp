#include "tools/frontend/wan_report.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "calibration/collective_cost.hpp"
#include "sim/executor.hpp"
#include "sim/platform.hpp"
#include "topologies/graph.hpp"

namespace trainsim {

namespace {
// The planner names communicators "<kind> group ..." and "pipeline link stage a->b ..." (models/planner.cpp).
std::string kind_of(const std::string& name) {
  if (name.rfind("pipeline link", 0) == 0) return "pp";
  const auto pos = name.find(" group");
  return pos == std::string::npos ? name.substr(0, name.find(' ')) : name.substr(0, pos);
}
}  // namespace

std::vector<WanCrossing> wan_crossings(const Cluster& cluster, const std::vector<Communicator>& comms) {
  std::vector<WanCrossing> out;
  const FabricFacts facts = fabric_facts(cluster.spec());
  if (facts.datacenters <= 1) return out;
  for (const Communicator& c : comms) {
    const std::string kind = kind_of(c.name);
    WanCrossing* entry = nullptr;
    for (WanCrossing& w : out) {
      if (w.kind == kind) entry = &w;
    }
    if (entry == nullptr) {
      out.push_back(WanCrossing{kind, 0, 0});
      entry = &out.back();
    }
    ++entry->total;
    bool crosses = false;
    if (!c.members.empty()) {
      const int first = facts.datacenter_of(cluster.node_of(c.members.front()));
      for (int g : c.members) crosses = crosses || facts.datacenter_of(cluster.node_of(g)) != first;
    }
    if (crosses) ++entry->crossing;
  }
  return out;
}

namespace {
std::vector<std::uint32_t> wan_link_ids(const Topology& topo) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t l = 0; l < topo.num_links(); ++l) {
    if (topo.link(l).kind == LinkKind::Wan) out.push_back(l);
  }
  return out;
}

struct PairLoad {
  double bytes = 0;
  std::vector<std::string> kinds;
};

// Bytes each pair of sites carries per iteration, derived from the tasks of
// the simulated ranks on communicators that cross the WAN, with the algorithm
// both network models choose (choose_algorithm) and the flow model's plans
// (sim/flow_collectives.cpp): the datacenter-hierarchical ring over the sites,
// a flat ring over the nodes, pairwise all-to-all; messages carry their
// payload. A rank stands for cluster GPUs / simulated ranks GPUs (1 at flow
// fidelity); a collective is counted once per communicator, each simulated
// member adding its share.
std::map<std::pair<int, int>, PairLoad> derived_pair_loads(const Cluster& cluster, const FabricFacts& facts,
                                                           const AnalyticalNetwork& analytical,
                                                           const SimulationSetup& setup, int& uncounted) {
  std::map<std::pair<int, int>, PairLoad> out;
  if (setup.ranks.empty()) return out;
  const double represented = static_cast<double>(cluster.num_gpus()) / static_cast<double>(setup.ranks.size());
  auto site = [&](int gpu) { return facts.datacenter_of(cluster.node_of(gpu)); };
  auto add = [&](int a, int b, double bytes, const std::string& kind) {
    PairLoad& p = out[{std::min(a, b), std::max(a, b)}];
    p.bytes += bytes;
    if (std::find(p.kinds.begin(), p.kinds.end(), kind) == p.kinds.end()) p.kinds.push_back(kind);
  };
  struct CommSites {
    std::vector<int> sites, counts;  // sites in order of first appearance, members in each
    std::vector<int> node_sites;     // site of each node, nodes in order of first appearance
    CommShape shape;
  };
  std::map<std::uint32_t, CommSites> cache;
  for (const RankProgram& rank : setup.ranks) {
    for (const Task& task : setup.programs[rank.program].tasks) {
      if (task.kind != TaskKind::Collective && task.kind != TaskKind::Send) continue;
      const std::uint32_t id = rank.comm_of_slot[task.ref];
      const Communicator& c = setup.comms[id];
      auto found = cache.find(id);
      if (found == cache.end()) {
        CommSites cs;
        std::vector<int> nodes;
        for (int g : c.members) {
          const auto it = std::find(cs.sites.begin(), cs.sites.end(), site(g));
          if (it == cs.sites.end()) {
            cs.sites.push_back(site(g));
            cs.counts.push_back(1);
          } else {
            ++cs.counts[static_cast<std::size_t>(it - cs.sites.begin())];
          }
          if (std::find(nodes.begin(), nodes.end(), cluster.node_of(g)) == nodes.end()) {
            nodes.push_back(cluster.node_of(g));
            cs.node_sites.push_back(site(g));
          }
        }
        if (cs.sites.size() > 1) cs.shape = analytical.shape(c.members);
        found = cache.emplace(id, std::move(cs)).first;
      }
      const CommSites& cs = found->second;
      if (cs.sites.size() < 2) continue;
      const std::string kind = kind_of(c.name);
      const double bytes = static_cast<double>(task.bytes);
      if (task.kind == TaskKind::Send) {
        const int to = c.members.front() == rank.gpu ? c.members.back() : c.members.front();
        add(site(rank.gpu), site(to), bytes * represented, kind);
        continue;
      }
      const double weight = represented / static_cast<double>(c.members.size());
      const int n = static_cast<int>(c.members.size());
      const int d = static_cast<int>(cs.sites.size());
      switch (choose_algorithm(cs.shape, task.collective, bytes).algorithm) {
        case CollectiveAlgorithm::DatacenterHierarchical:
          for (int i = 0; i < d; ++i) {
            add(cs.sites[i], cs.sites[(i + 1) % d], ring_factor(task.collective, d) * bytes * weight, kind);
          }
          break;
        case CollectiveAlgorithm::Ring: {
          // One ring over the nodes (all its channels together): each hop between sites carries ring factor x B.
          const std::size_t hops =
              task.collective == CollectiveKind::Broadcast ? cs.node_sites.size() - 1 : cs.node_sites.size();
          for (std::size_t i = 0; i < hops; ++i) {
            const int a = cs.node_sites[i], b = cs.node_sites[(i + 1) % cs.node_sites.size()];
            if (a != b) add(a, b, ring_factor(task.collective, n) * bytes * weight, kind);
          }
          break;
        }
        case CollectiveAlgorithm::Pairwise:
          // Every member sends B / n to every other member.
          for (std::size_t i = 0; i < cs.sites.size(); ++i) {
            for (std::size_t j = i + 1; j < cs.sites.size(); ++j) {
              add(cs.sites[i], cs.sites[j], 2.0 * cs.counts[i] * cs.counts[j] * bytes / n * weight, kind);
            }
          }
          break;
        default:
          ++uncounted;
          break;
      }
    }
  }
  return out;
}
}  // namespace

void track_wan_links(Platform& platform, NetworkModel& network, bool flow) {
  if (!flow || fabric_facts(platform.cluster().spec()).datacenters <= 1) return;
  network.track_links(wan_link_ids(platform.topology()));
}

std::vector<WanLinkLoad> wan_link_loads(Platform& platform, const SimulationSetup& setup, const NetworkModel& network,
                                        bool flow, double iteration_s, std::vector<std::string>& warnings) {
  std::vector<WanLinkLoad> out;
  const Cluster& cluster = platform.cluster();
  const FabricFacts facts = fabric_facts(cluster.spec());
  if (facts.datacenters <= 1) return out;
  int uncounted = 0;
  std::map<std::pair<int, int>, PairLoad> pairs =
      derived_pair_loads(cluster, facts, platform.analytical_network(), setup, uncounted);
  std::map<std::pair<int, int>, double> busiest;
  if (flow) {
    // The counted bytes replace the derived ones; the kinds stay. Flows carry
    // bytes / the network's bus-bandwidth efficiency (sim/flow_collectives.cpp):
    // back to payload with the cluster's lowest (its only one on one GPU type).
    for (auto& [key, p] : pairs) p.bytes = 0;
    double efficiency = 1;
    for (const CalibrationProfile& profile : platform.profiles()) {
      if (profile.network.busbw_efficiency.value > 0) {
        efficiency = std::min(efficiency, profile.network.busbw_efficiency.value);
      }
    }
    const Topology& topo = platform.topology();
    const std::vector<std::uint32_t> ids = wan_link_ids(topo);
    const std::vector<LinkLoad> loads = network.link_loads(ids);
    for (std::size_t i = 0; i < ids.size() && i < loads.size(); ++i) {
      const TopologyLink& link = topo.link(ids[i]);
      const int a = topo.vertex(link.from).datacenter, b = topo.vertex(link.to).datacenter;
      const std::pair<int, int> key{std::min(a, b), std::max(a, b)};
      if (!(loads[i].bytes > 0)) continue;
      pairs[key].bytes += loads[i].bytes * efficiency;
      busiest[key] = std::max(busiest[key], loads[i].busy_s);
    }
  } else if (uncounted > 0) {
    warnings.push_back("WAN utilisation: " + std::to_string(uncounted) +
                       " collective(s) crossing the WAN with an algorithm it does not count are not counted at "
                       "analytical fidelity; use --fidelity flow");
  }
  const DatacenterSpec& dc = cluster.spec().datacenters;
  for (const auto& [key, p] : pairs) {
    if (!(p.bytes > 0)) continue;
    WanLinkLoad w;
    w.site_a = key.first;
    w.site_b = key.second;
    w.links = dc.wan_links;
    w.bytes = p.bytes;
    const double capacity = 2.0 * dc.wan_links * dc.wan_bandwidth * iteration_s;
    w.utilization = capacity > 0 ? p.bytes / capacity : 0.0;
    if (flow && iteration_s > 0) w.busy_fraction = std::min(1.0, busiest[key] / iteration_s);
    w.kinds = p.kinds;
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace trainsim
