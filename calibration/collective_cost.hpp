#pragma once
// The one place where NCCL-like collective algorithms are chosen and costed by
// their contention-free alpha-beta time. The analytical network charges these
// costs, the flow network plans the flows of the algorithm chosen here, and the
// calibration fitter normalises nccl-tests measurements with the same bus
// factors and step counts (docs/network.md, "Algorithms and costs").
#include <cstdint>

#include "calibration/profile.hpp"

namespace trainsim {

enum class CollectiveKind : std::uint8_t { AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast };

// Ring, Tree (double binary tree across nodes), Hierarchical (intra-node
// reduce-scatter, inter-node all-reduce, intra-node all-gather), NVLS (in-switch
// reduction), Pairwise (all-to-all), PointToPoint, and DatacenterHierarchical
// (inside every datacenter first, then across the WAN, then inside again).
// Auto asks choose_algorithm.
enum class CollectiveAlgorithm : std::uint8_t {
  Auto,
  Ring,
  Tree,
  Hierarchical,
  Nvls,
  Pairwise,
  PointToPoint,
  DatacenterHierarchical
};
const char* to_string(CollectiveAlgorithm a);

// NCCL's tuner derates the tree's bus bandwidth by this factor when it compares
// algorithms (NCCL src/graph/tuning.cc, ncclTopoTuneModel: tree busBw * .92).
inline constexpr double kNcclTreeBandwidthFactor = 0.92;

// Traffic of a ring collective on its busiest link per byte of buffer
// (nccl-tests "bus bandwidth" factor), and its steps (each paying one hop latency).
double ring_factor(CollectiveKind kind, int n);
int ring_steps(CollectiveKind kind, int n);

// The same for the operation names of nccl-tests / calibration/cuda/collective_sweep
// ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv").
double bus_factor(const char* nccl_test_operation, int n);
int hop_steps(const char* nccl_test_operation, int n);

// Placement facts of a communicator, computed once by the network model
// (AnalyticalNetwork::shape) from the platform: bandwidths are per GPU per
// direction in bytes/s after link efficiency (slowest member), latencies in
// seconds. A "node" here is a scale-up domain: a node whose GPUs have no
// scale-up links counts each GPU as its own domain.
struct CommShape {
  int size = 1;                                    // members
  int nodes = 1;                                   // distinct scale-up domains spanned
  int max_per_node = 1;                            // most members in one domain
  bool uniform_per_node = true;                    // the same number of members in every domain
  double scaleup_bw = 0;                           // inside a domain
  double nvls_bw = 0;                              // NVLS bus bandwidth, 0 if unavailable
  double network_bw = 0;                           // between domains inside a datacenter (NIC share, leaf uplink)
  double scaleup_latency = 0;                      // per step inside a domain
  double network_latency = 0;                      // per step between domains: profile hop + the fabric links crossed
  double base_latency = 0;                         // per collective launch
  double scaleup_link_bw = 0;                      // per direction, before efficiency (slowest member)
  const EfficiencyCurve* scaleup_curve = nullptr;  // measured ring busbw curve, if any
  const EfficiencyCurve* nvls_curve = nullptr;     // measured NVLS busbw curve, if any
  const EfficiencyCurve* p2p_curve = nullptr;      // measured send/recv bandwidth curve, if any
  // Several datacenters (docs/network.md, "Datacenters").
  int datacenters = 1;     // distinct datacenters spanned
  int per_dc_size = 0;     // members in every datacenter when equal, else 0
  int per_dc_nodes = 0;    // most domains in one datacenter
  double wan_bw = 0;       // across the WAN: min(NIC share, leaf uplink, WAN share per GPU)
  double wan_latency = 0;  // per step across the WAN: profile hop + fabric links + WAN latency
  bool operator==(const CommShape&) const = default;
};

struct AlgorithmCost {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::Ring;
  double seconds = 0;
};

// Contention-free time of `algorithm` for a collective of `bytes` (NCCL buffer
// convention); a negative value when the algorithm does not apply to the shape.
double algorithm_seconds(const CommShape& shape, CollectiveKind kind, CollectiveAlgorithm algorithm, double bytes);

// NCCL-like choice: across datacenters the datacenter-hierarchical algorithm
// (when every datacenter holds the same number of members); otherwise ring,
// NVLS inside an NVLink-SHARP domain, or the double binary tree across domains,
// whichever is cheapest with the tree's bandwidth derated by
// `tree_bandwidth_factor` as NCCL's tuner does. `seconds` is the chosen
// algorithm's own (un-derated) cost.
AlgorithmCost choose_algorithm(const CommShape& shape, CollectiveKind kind, double bytes,
                               double tree_bandwidth_factor = kNcclTreeBandwidthFactor);

// All-to-all-v with per-pair sizes: the most bytes any one member sends or
// receives over each link class (a member's traffic to itself moves nothing).
// A uniform all-to-all of buffer B over n members with k per domain loads
// every member with B(k-1)/n over scale-up and B(n-k)/n over the network.
struct AllToAllVLoad {
  double scaleup = 0;  // inside the member's scale-up domain
  double network = 0;  // to or from other domains (the member's NIC)
  double wan = 0;      // to or from other datacenters (its share of the WAN)
};
// Contention-free time of a pairwise all-to-all-v: the busiest member's
// traffic per link class at that class's bandwidth (classes run at once),
// plus the pairwise algorithm's latencies; equals all_to_all's cost for a
// uniform matrix.
double all_to_all_v_seconds(const CommShape& shape, const AllToAllVLoad& load);

// One transfer between the two members of `shape`.
double p2p_seconds(const CommShape& shape, double bytes);

}  // namespace trainsim
