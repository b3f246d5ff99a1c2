#pragma once
// NCCL-like collectives decomposed into flows on the cluster graph, run on the
// flow network (docs/network.md).
//
// Algorithms (bandwidth-equivalent, not chunk-by-chunk: every flow of a phase
// runs at once, carrying the bytes its edge carries over the whole algorithm,
// and the algorithm's per-step latencies are added to the phase):
// - Ring: member i sends to its ring successor; each edge carries factor*S
//   (all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, broadcast 1)
//   plus steps*(hop latency). Across nodes with k members per node there are k
//   channels; channel c enters and leaves every node through rail c's NIC
//   (NCCL's rail-aligned rings), its members chained over NVLink inside.
// - Tree (all-reduce across nodes): NCCL's double binary tree over nodes per
//   channel (each tree S/2: up to the parent and back down; the second tree
//   mirrors or shifts the first so that a node is interior in at most one, and
//   each NIC carries 2S/k like the ring's), with a reduce-scatter / all-gather
//   ring inside each node; latency 2*depth hops.
// - Hierarchical (all-reduce): three phases, one after the other: intra-node
//   ring reduce-scatter, inter-node ring all-reduce among the GPUs of equal
//   local rank, intra-node ring all-gather.
// - NVLS (all-reduce inside one node with NVLink SHARP): every GPU sends to
//   and receives from its node's switch.
// - Pairwise all-to-all (and all-to-all-v with per-pair sizes): one flow per
//   ordered pair.
// - Send/recv: one flow.
// On a rail-optimized fabric a flow between nodes whose GPUs sit on different
// rails is relayed like NCCL's PXN: over the scale-up switch to the source
// node's GPU on the destination's rail, then through that rail's NIC.
// Link efficiency from the calibration profile is applied by inflating the
// bytes of each flow (bytes / efficiency of its level: scale-up or network);
// inside one node a measured bus-bandwidth curve replaces the efficiency and
// the latencies, as in the analytical model. Automatic choice is
// choose_algorithm of calibration/collective_cost on the analytical model's
// shape of the communicator: tree across nodes for small all-reduces, ring for
// large ones, NVLS inside a node, and across datacenters the
// datacenter-hierarchical algorithm: phase 1 inside every datacenter
// (reduce-scatter), phase 2 a ring among the members of equal index across the
// datacenters on the WAN (all-reduce of their shard), phase 3 inside again
// (all-gather); all-gather and reduce-scatter use the two halves of it.
// In a node without scale-up links every GPU is its own domain: its flows to
// the node's other GPUs go through the NICs (and the fabric when NICs differ).
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "calibration/collective_cost.hpp"
#include "calibration/profile.hpp"
#include "sim/flow_network.hpp"
#include "sim/network.hpp"
#include "sim/program.hpp"
#include "topologies/graph.hpp"

namespace trainsim {

// The algorithms of calibration/collective_cost (one enum for both models).
using FlowAlgorithm = CollectiveAlgorithm;

// One routed flow of a plan; `latency` is added to the route's own latency.
struct PlannedFlow {
  std::uint32_t src = 0, dst = 0;  // topology vertices
  Route route;
  double bytes = 0;  // on the wire (efficiency applied)
  Time latency;
};

struct CollectivePlan {
  FlowAlgorithm algorithm = FlowAlgorithm::Ring;
  int channels = 1;
  std::vector<PlannedFlow> flows;
  // Phases run one after the other: phase p is flows [phase_end[p-1], phase_end[p]).
  std::vector<std::uint32_t> phase_end;
  // Fixed cost of each phase (algorithm steps, launch): no phase ends sooner.
  std::vector<Time> phase_latency;
  std::size_t phases() const { return phase_end.size(); }
};

struct FlowOptions {
  FlowAlgorithm all_reduce = FlowAlgorithm::Auto;  // force an all-reduce algorithm
  double tree_bandwidth_factor = 0.92;             // NCCL's tree derating, used when choosing
};

// Parent of `rank` in tree 0 or 1 of NCCL's double binary tree over `nranks`
// (-1 for the root); every rank has at most two children over both trees.
int double_binary_tree_parent(int nranks, int rank, int tree);

using PlanId = std::uint32_t;

class FlowCollectives {
 public:
  // profiles[t] belongs to the cluster's GPU type t. `topology` must outlive this.
  FlowCollectives(const Cluster& cluster, Topology& topology, const std::vector<CalibrationProfile>& profiles,
                  FlowOptions options = {});

  // Plans. `tag` feeds ECMP hashing (e.g. the communicator id). `bytes` follows
  // the NCCL buffer convention (all-gather: output size).
  CollectivePlan plan_collective(const std::vector<int>& members, CollectiveKind kind, double bytes, std::uint64_t tag,
                                 FlowAlgorithm algorithm = FlowAlgorithm::Auto);
  CollectivePlan plan_p2p(int src_gpu, int dst_gpu, double bytes, std::uint64_t tag);
  // bytes[i * n + j]: what member i sends to member j.
  CollectivePlan plan_all_to_all_v(const std::vector<int>& members, std::span<const double> bytes, std::uint64_t tag);

  // Plans kept for the run; ids are dense and stable.
  PlanId add_plan(CollectivePlan plan);
  const CollectivePlan& plan(PlanId id) const { return plans_[id]; }

  // Runs a kept plan from `now`; `cookie` comes back when its last phase completes.
  void start(Time now, PlanId plan, std::uint64_t cookie);
  Time next_event() const { return network_.next_event(); }
  // Processes everything up to `now` (call with now = next_event() to step);
  // appends (cookie, time) of finished plans.
  void advance(Time now, std::vector<TransferDone>& done);

  // Duration of a plan run alone on an idle network (tests, benchmarks).
  Time measure(const CollectivePlan& plan);

  FlowNetwork& network() { return network_; }
  Topology& topology() { return *topology_; }

 private:
  struct Level {  // per-member-set figures, slowest member
    double su_eff = 1, net_eff = 1, su_lat = 0, net_lat = 0, base = 0;
    double nvls_eff = 0;  // 0 = no NVLS
    const EfficiencyCurve* su_curve = nullptr;
    const EfficiencyCurve* nvls_curve = nullptr;
    const EfficiencyCurve* p2p_curve = nullptr;
  };
  struct Layout {
    std::vector<std::vector<int>> per_node;  // members grouped by node, nodes in order of first appearance
    int k = 0;                               // members per node when equal on every node, else 0
  };
  struct Running {
    PlanId plan = 0;
    std::uint32_t phase = 0;
    std::uint64_t cookie = 0;
    bool active = false;
  };

  Level level_of(const std::vector<int>& members) const;
  Layout layout_of(const std::vector<int>& members) const;
  // Scale-up domain of a GPU: its node, or the GPU itself in a node without scale-up links.
  int domain_of(int gpu) const;
  // Flows between the two GPUs go over scale-up links.
  bool over_scaleup(int a, int b) const;
  // Phases of the datacenter-hierarchical algorithm (see the header comment).
  void plan_across_datacenters(CollectivePlan& p, const std::vector<int>& members, CollectiveKind kind, double bytes,
                               std::uint64_t tag, const Level& lv);
  // Appends a routed flow of `bytes` (before efficiency) between two vertices.
  void add_flow(CollectivePlan& p, std::uint32_t src, std::uint32_t dst, double bytes, std::uint64_t tag,
                double efficiency);
  // Appends `f` (bytes set) routed from f.src through `via` (kNoVertex: directly)
  // to f.dst as one connection: one flow, or, under ECMP with k queue pairs per
  // connection and a route with a choice of path, k flows of bytes / k hashed apart.
  void push_connection(CollectivePlan& p, PlannedFlow f, std::uint32_t via, std::uint64_t tag);
  // Ring-shaped flows between GPUs; efficiency by level unless `eff` is given.
  void add_gpu_flow(CollectivePlan& p, int src_gpu, int dst_gpu, double bytes, std::uint64_t tag, const Level& lv,
                    double eff = 0);
  // Largest per-step latency (hop latency of the level + route) over flows [first, end).
  double max_alpha(const CollectivePlan& p, std::size_t first, const Level& lv) const;
  // Ring edges (src, dst, channel) for a layout.
  void ring_edges(const Layout& lay, const std::vector<int>& members, bool open,
                  std::vector<std::array<int, 3>>& out) const;
  // Closes the phase of flows [first, end) with a fixed cost of `latency` seconds.
  void finish_phase(CollectivePlan& p, std::size_t first, double latency) const;
  void start_phase(Time now, std::uint32_t running);

  const Cluster* cluster_;
  Topology* topology_;
  const std::vector<CalibrationProfile>* profiles_;
  AnalyticalNetwork analytical_;
  FlowOptions options_;
  FlowNetwork network_;
  std::vector<CollectivePlan> plans_;
  std::vector<Running> running_;
  std::vector<std::uint32_t> free_running_;
  std::vector<FlowSpec> specs_;
  std::vector<TransferDone> step_done_;
};

}  // namespace trainsim
