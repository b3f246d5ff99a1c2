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

class NetworkModel;
class Platform;
struct SimulationSetup;

struct WanCrossing {
  std::string kind;  // "tp", "dp", "pp", "cp", "ep", ...
  int crossing = 0;  // communicators of this kind whose members sit in several datacenters
  int total = 0;     // communicators of this kind in the plan
};

// Empty for a cluster in one datacenter; else one entry per kind, in first-seen order.
std::vector<WanCrossing> wan_crossings(const Cluster& cluster, const std::vector<Communicator>& comms);

// What the WAN between two sites carried in one iteration (all its parallel links, both directions).
struct WanLinkLoad {
  int site_a = 0, site_b = 0;      // datacenters, site_a < site_b
  int links = 0;                   // parallel WAN links between them, each wan_bandwidth per direction
  double bytes = 0;                // bytes per iteration
  double utilization = 0;          // bytes / (2 x links x wan_bandwidth x iteration time)
  double busy_fraction = -1;       // flow: share of the iteration its busiest link direction carried a flow; else -1
  std::vector<std::string> kinds;  // kinds of communicators whose traffic crosses it
};

// Before a flow run: has the network count the WAN links' load (nothing for
// a cluster in one datacenter or at analytical fidelity, `flow` false).
void track_wan_links(Platform& platform, NetworkModel& network, bool flow);
// After the run: one entry per pair of sites that carried traffic. Flow: the
// counted load of the WAN links; analytical: derived from the collectives and
// messages of the communicators that cross the WAN (a kind it cannot count
// adds a warning). Empty for a cluster in one datacenter.
std::vector<WanLinkLoad> wan_link_loads(Platform& platform, const SimulationSetup& setup, const NetworkModel& network,
                                        bool flow, double iteration_s, std::vector<std::string>& warnings);

}  // namespace trainsim
