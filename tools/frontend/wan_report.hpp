#pragma once
// Which communicators of a plan cross the WAN: per kind of communicator (tp,
// dp, pipeline links, ...), how many span several datacenters, so a report
// shows which parallel dimension the placement put across the sites
// (docs/cross-datacenter.md).
#include <string>
#include <vector>

#include "sim/network.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

struct WanCrossing {
  std::string kind;  // "tp", "dp", "pp", "cp", "ep", ...
  int crossing = 0;  // communicators of this kind whose members sit in several datacenters
  int total = 0;     // communicators of this kind in the plan
};

// Empty for a cluster in one datacenter; else one entry per kind, in first-seen order.
std::vector<WanCrossing> wan_crossings(const Cluster& cluster, const std::vector<Communicator>& comms);

}  // namespace trainsim
