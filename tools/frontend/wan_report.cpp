#include "tools/frontend/wan_report.hpp"

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

}  // namespace trainsim
