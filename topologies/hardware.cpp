#include "topologies/hardware.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <tuple>
#include <utility>

namespace trainsim {

double GpuSpec::window_slowdown_at(double t_s) const {
  double f = 1.0;
  for (const SlowdownWindow& w : slowdown_windows) {
    if (t_s >= w.start_s && t_s < w.end_s) f *= w.factor;
  }
  return f;
}

double GpuSpec::peak_slowdown() const {
  double worst = 1.0;
  for (const SlowdownWindow& w : slowdown_windows) worst = std::max(worst, window_slowdown_at(w.start_s));
  return slowdown * worst;
}

const char* to_string(Dtype d) {
  switch (d) {
    case Dtype::FP32:
      return "fp32";
    case Dtype::TF32:
      return "tf32";
    case Dtype::FP16:
      return "fp16";
    case Dtype::BF16:
      return "bf16";
    case Dtype::FP8:
      return "fp8";
  }
  return "?";
}

std::size_t bytes_per_element(Dtype d) {
  switch (d) {
    case Dtype::FP32:
    case Dtype::TF32:
      return 4;
    case Dtype::FP16:
    case Dtype::BF16:
      return 2;
    case Dtype::FP8:
      return 1;
  }
  return 4;
}

const char* to_string(ScaleupKind k) {
  switch (k) {
    case ScaleupKind::NVSwitch:
      return "nvswitch";
    case ScaleupKind::Direct:
      return "direct";
    case ScaleupKind::PCIe:
      return "pcie";
    case ScaleupKind::None:
      return "none";
  }
  return "?";
}

const char* to_string(NicLinkLayer l) { return l == NicLinkLayer::Ethernet ? "ethernet" : "infiniband"; }

const char* to_string(FabricRouting r) { return r == FabricRouting::Adaptive ? "adaptive" : "ecmp"; }

int ClusterSpec::total_gpus() const {
  int n = 0;
  for (const auto& g : groups) n += g.count * g.node.gpus_per_node;
  return n;
}

Cluster::Cluster(ClusterSpec spec) : spec_(std::move(spec)) {
  std::size_t nodes = 0, gpus = 0;
  for (const NodeGroup& g : spec_.groups) {
    nodes += static_cast<std::size_t>(std::max(0, g.count));
    gpus +=
        static_cast<std::size_t>(std::max(0, g.count)) * static_cast<std::size_t>(std::max(0, g.node.gpus_per_node));
  }
  num_nodes_ = static_cast<int>(nodes);
  num_gpus_ = static_cast<int>(gpus);
  // One node size: a GPU's node by division (a million GPUs are planned per
  // configuration of a search); one group: every node's spec is the group's.
  int per_node_all = spec_.groups.empty() ? 0 : std::max(0, spec_.groups.front().node.gpus_per_node);
  for (const NodeGroup& g : spec_.groups) {
    if (g.count > 0 && g.node.gpus_per_node != per_node_all) per_node_all = 0;
  }
  gpus_per_node_ = per_node_all;
  if (gpus_per_node_ > 0 && (gpus_per_node_ & (gpus_per_node_ - 1)) == 0)
    node_shift_ = std::countr_zero(static_cast<unsigned>(gpus_per_node_));
  if (spec_.groups.size() > 1) nodes_.reserve(nodes);
  if (gpus_per_node_ == 0) node_of_gpu_.reserve(gpus);
  // A table of every GPU's type only where they differ: several GPU models,
  // or slowed GPUs (each slowed one gets a type of its own, below).
  bool one_type = spec_.slowdowns.empty();
  for (const NodeGroup& g : spec_.groups) one_type = one_type && g.node.gpu.name == spec_.groups.front().node.gpu.name;
  if (!one_type) gpu_type_of_gpu_.reserve(gpus);
  int first_node = 0;
  for (int g = 0; g < static_cast<int>(spec_.groups.size()); ++g) {
    const NodeSpec& node = spec_.groups[g].node;
    int type = -1;
    for (int t = 0; t < static_cast<int>(gpu_types_.size()); ++t) {
      if (gpu_types_[t].name == node.gpu.name) type = t;
    }
    if (type < 0) {
      type = static_cast<int>(gpu_types_.size());
      gpu_types_.push_back(node.gpu);
    }
    // Filled in bulk (a million GPUs are planned per configuration of a search).
    const auto count = static_cast<std::size_t>(std::max(0, spec_.groups[g].count));
    const auto per_node = static_cast<std::size_t>(std::max(0, node.gpus_per_node));
    if (spec_.groups.size() > 1) nodes_.insert(nodes_.end(), count, g);
    if (gpus_per_node_ == 0) {
      const std::size_t first_gpu = node_of_gpu_.size();
      node_of_gpu_.resize(first_gpu + count * per_node);
      int* gpu_node = node_of_gpu_.data() + first_gpu;
      for (std::size_t i = 0; i < count; ++i) {
        for (std::size_t l = 0; l < per_node; ++l) *gpu_node++ = first_node + static_cast<int>(i);
      }
    }
    first_node += static_cast<int>(count);
    if (!one_type) gpu_type_of_gpu_.insert(gpu_type_of_gpu_.end(), count * per_node, type);
  }
  base_type_.resize(gpu_types_.size());
  for (int t = 0; t < static_cast<int>(gpu_types_.size()); ++t) base_type_[t] = t;
  // A slowed GPU gets a type of its own (same name and profile, its own slowdown),
  // so costs, equivalence classes and reports see it apart from its peers.
  std::map<std::tuple<int, double, std::vector<SlowdownWindow>>, int> slowed;  // (base type, factor, windows) -> type
  for (const GpuSlowdown& s : spec_.slowdowns) {
    const int base = gpu_type_of_gpu_[s.gpu];
    const auto [it, fresh] = slowed.try_emplace({base, s.factor, s.windows}, static_cast<int>(gpu_types_.size()));
    if (fresh) {
      GpuSpec slowed_gpu = gpu_types_[base];
      slowed_gpu.slowdown = s.factor;
      slowed_gpu.slowdown_windows = s.windows;
      gpu_types_.push_back(slowed_gpu);
      base_type_.push_back(base);
    }
    gpu_type_of_gpu_[s.gpu] = it->second;
  }
}

}  // namespace trainsim
