#pragma once
// Small hand-made clusters for topology and engine tests.
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

}  // namespace trainsim::testing
