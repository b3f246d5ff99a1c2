#pragma once
// Small hand-made clusters and profiles for engine tests.
#include "calibration/profile.hpp"
#include "topologies/hardware.hpp"

namespace trainsim::testing {

// A GPU with 100 TFLOP/s BF16 and 1 TB/s HBM; nodes of `per_node` GPUs with
// 100 GB/s scale-up links and one 10 GB/s NIC per GPU.
inline ClusterSpec toy_cluster(int nodes, int per_node) {
  GpuSpec g;
  g.name = "toy";
  g.peak_flops[static_cast<std::size_t>(Dtype::BF16)] = 100e12;
  g.memory_bytes = 1e12;
  g.memory_bandwidth = 1e12;
  NodeSpec n;
  n.name = "toy-node";
  n.gpu = g;
  n.gpus_per_node = per_node;
  n.scaleup_bandwidth = 100e9;
  n.nic_count = per_node;
  n.nic_bandwidth = 10e9;
  ClusterSpec c;
  c.groups.push_back(NodeGroup{n, nodes});
  return c;
}

// Every kernel at exactly the spec peak, no launch overhead, links at full
// bandwidth; latencies as given.
inline CalibrationProfile ideal_profile(double hop_latency = 0, double base_latency = 0) {
  CalibrationProfile p;
  p.gpu = "toy";
  for (auto& c : p.gemm) c.curve = EfficiencyCurve::constant(1.0);
  p.gemm_min_dim.curve = EfficiencyCurve::constant(1.0);
  p.attention.curve = EfficiencyCurve::constant(1.0);
  p.memory_bound.curve = EfficiencyCurve::constant(1.0);
  p.scaleup.busbw_efficiency.value = 1.0;
  p.network.busbw_efficiency.value = 1.0;
  p.scaleup.latency.value = p.network.latency.value = hop_latency;
  p.scaleup.base_latency.value = p.network.base_latency.value = base_latency;
  return p;
}

}  // namespace trainsim::testing
