#pragma once
// Communicators (groups of GPUs) and the analytical network model: alpha-beta
// per hierarchy level (scale-up domain vs scale-out network) with calibrated
// bus-bandwidth efficiency and per-step latency, choosing ring or tree the way
// NCCL's tuner does (the faster of the two for the message size).
#include <cstdint>
#include <string>
#include <vector>

#include "calibration/profile.hpp"
#include "sim/program.hpp"
#include "sim/time.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

struct Communicator {
  std::string name;          // e.g. "tp[stage 0, replica 3]"
  std::vector<int> members;  // global GPU ids, in rank order
  // How many members are simulated (the rest are provably equivalent to a
  // simulated one and arrive at the same time); rendezvous waits for these.
  int simulated_members = 0;
};

// Placement facts of a communicator, computed once.
struct CommShape {
  int size = 1;           // members
  int nodes = 1;          // distinct nodes spanned
  int max_per_node = 1;   // most members on one node
  double scaleup_bw = 0;  // per GPU per direction, bytes/s, after efficiency (slowest member)
  double nvls_bw = 0;     // NVLS bus bandwidth, 0 if unavailable
  double network_bw = 0;  // per GPU per direction, bytes/s, after efficiency (slowest member)
  double scaleup_latency = 0, network_latency = 0, base_latency = 0;  // seconds
  double scaleup_link_bw = 0;                      // per direction, before efficiency (slowest member)
  const EfficiencyCurve* scaleup_curve = nullptr;  // measured ring busbw curve, if any
  const EfficiencyCurve* nvls_curve = nullptr;     // measured NVLS busbw curve, if any
};

// Traffic of a ring collective on its busiest link per byte of buffer
// (nccl-tests "bus bandwidth" factor), and its steps (each paying one hop latency).
double ring_factor(CollectiveKind kind, int n);
int ring_steps(CollectiveKind kind, int n);

class AnalyticalNetwork {
 public:
  // profiles[t] is the calibration profile of the cluster's GPU type t.
  AnalyticalNetwork(const Cluster& cluster, const std::vector<CalibrationProfile>& profiles);

  CommShape shape(const std::vector<int>& members) const;
  // Time of one collective of `bytes` (NCCL buffer convention) on a communicator.
  double collective_seconds(const CommShape& shape, CollectiveKind kind, double bytes) const;
  // Time of one point-to-point transfer between the two members of `shape`.
  double p2p_seconds(const CommShape& shape, double bytes) const;

 private:
  const Cluster* cluster_;
  const std::vector<CalibrationProfile>* profiles_;
};

}  // namespace trainsim
