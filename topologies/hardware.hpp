#pragma once
// Typed hardware description: GPU spec sheets, nodes (scale-up domain + NICs)
// and clusters of node groups. Filled from validated JSON at the edge; the
// simulator trusts these values. All rates in SI base units (FLOP/s, bytes/s).
#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "topologies/embedded_file.hpp"

namespace trainsim {

enum class Dtype : std::uint8_t { FP32, TF32, FP16, BF16, FP8 };
inline constexpr std::size_t kNumDtypes = 5;
const char* to_string(Dtype d);
std::size_t bytes_per_element(Dtype d);

// A slowdown from `start_s` (inclusive) to `end_s` (exclusive), seconds into the iteration.
struct SlowdownWindow {
  double start_s = 0;
  double end_s = 0;
  double factor = 1.0;
  bool operator==(const SlowdownWindow&) const = default;
  auto operator<=>(const SlowdownWindow&) const = default;
};

struct GpuSpec {
  std::string name;                             // canonical name, e.g. "H100-SXM-80GB"
  std::string vendor;                           // "nvidia" | "amd"
  std::string arch;                             // e.g. "hopper"
  std::array<double, kNumDtypes> peak_flops{};  // dense FLOP/s per dtype; 0 = not supported
  double memory_bytes = 0;                      // HBM capacity
  double memory_bandwidth = 0;                  // HBM spec bandwidth, bytes/s
  double scaleup_bandwidth = 0;                 // scale-up aggregate bidirectional bytes/s per GPU
  double host_bandwidth = 0;  // GPU-host link (PCIe, NVLink-C2C), aggregate bidirectional bytes/s; 0 = not given
  std::string source;         // where the figures come from
  double slowdown = 1.0;      // kernels take this many times as long (a perturbed GPU; scenario "perturbations")
  // Slowdowns that hold only within part of the iteration (thermal throttling,
  // a transient straggler), on top of `slowdown`; sorted by start, may overlap.
  std::vector<SlowdownWindow> slowdown_windows;
  // A GPU defined inline in a scenario may borrow the calibration profile of a
  // catalog GPU with the same chip (its kernel and collective efficiencies); empty = its own.
  std::string profile_gpu;

  double peak(Dtype d) const { return peak_flops[static_cast<std::size_t>(d)]; }
  // The factor of `slowdown_windows` in force at `t_s` seconds into the iteration.
  double window_slowdown_at(double t_s) const;
  // The largest factor it ever runs at: `slowdown` times the worst overlap of windows.
  double peak_slowdown() const;
};

enum class ScaleupKind : std::uint8_t { NVSwitch, Direct, PCIe, None };
const char* to_string(ScaleupKind k);

// The NICs' link layer: InfiniBand or Ethernet (RoCE). It decides the default
// routing of the fabric (FabricSpec::routing, docs/network.md).
enum class NicLinkLayer : std::uint8_t { InfiniBand, Ethernet };
const char* to_string(NicLinkLayer l);

struct NodeSpec {
  std::string name;       // e.g. "dgx-h100"
  GpuSpec gpu;            // the GPU model in this node
  int gpus_per_node = 8;  // GPUs sharing one scale-up domain
  ScaleupKind scaleup = ScaleupKind::NVSwitch;
  double scaleup_bandwidth = 0;  // per GPU per direction, bytes/s
  bool nvls = false;             // in-switch reduction available
  int nic_count = 0;             // NICs per node
  double nic_bandwidth = 0;      // per NIC per direction, bytes/s
  NicLinkLayer nic_link_layer = NicLinkLayer::InfiniBand;
  std::string source;

  // Network bandwidth available to one GPU when all GPUs of the node use the NICs.
  double nic_bandwidth_per_gpu() const { return gpus_per_node > 0 ? nic_bandwidth * nic_count / gpus_per_node : 0.0; }
};

// Scale-out network between nodes (used at flow fidelity; docs/network.md).
enum class FabricKind : std::uint8_t {
  RailOptimized,  // one leaf per NIC rail per group of nodes; rails meet at the spines
  FatTree,        // one leaf per group of nodes, all NICs of those nodes on it
};

// How the switches spread traffic over a leaf's equal-cost up-links.
enum class FabricRouting : std::uint8_t {
  Ecmp,      // per-flow hashing: each queue pair of a connection stays on one spine
  Adaptive,  // per-packet choice by load (InfiniBand AR, Spectrum-X): the up-links act as one bundle
};
const char* to_string(FabricRouting r);

// Most queue pairs per connection (NCCL_IB_QPS_PER_CONNECTION; NCCL's own
// ceiling is 128, NCCL_IB_MAX_QPS in src/transport/net_ib.cc).
inline constexpr int kMaxQpsPerConnection = 128;

struct FabricSpec {
  FabricKind kind = FabricKind::RailOptimized;
  double oversubscription = 1.0;  // leaf uplink oversubscription ratio (1 = non-blocking)
  int nodes_per_leaf = 0;         // nodes under one leaf; 0 = default (a 64-port leaf, half down)
  int spines = 0;                 // spine switches per datacenter; 0 = default (one per leaf uplink port)
  double link_latency = 0.5e-6;   // seconds per NIC-leaf, leaf-spine and spine-gateway link
  // The scenario reader sets the default from the NICs' link layer (adaptive
  // on InfiniBand, ECMP on Ethernet); a spec built in code gets ECMP.
  FabricRouting routing = FabricRouting::Ecmp;
  int qps_per_connection = 1;  // flows per connection that ECMP hashes independently
};

// Most parallel WAN links per pair of datacenters (each is a link of the flow graph).
inline constexpr int kMaxWanLinks = 64;

// Several datacenters joined by WAN links (full mesh); nodes are split evenly
// in global node order.
struct DatacenterSpec {
  int count = 1;
  double wan_bandwidth = 0;  // per WAN link per direction, bytes/s
  double wan_latency = 0;    // seconds per WAN link
  int wan_links = 1;         // parallel WAN links per pair of datacenters (flows spread over them)
};

// A cluster is one or more groups of identical nodes (mixed fleets have several).
struct NodeGroup {
  NodeSpec node;
  int count = 1;
};

// One GPU that runs slower than its type: a straggler, a throttled or degraded GPU.
struct GpuSlowdown {
  int gpu = 0;                          // global GPU id
  double factor = 1.0;                  // its kernels take this many times as long
  std::vector<SlowdownWindow> windows;  // and this much more within each window
};

struct ClusterSpec {
  std::string name;
  std::vector<NodeGroup> groups;
  FabricSpec fabric;
  DatacenterSpec datacenters;
  std::vector<GpuSlowdown> slowdowns;  // at most one per GPU (checked at loading)
  // Scenario `cluster.gpu_speed_spread`: replaces every GPU model's profile figure
  // (0: GPUs screened to one speed); unset = the profiles' (docs/calibration.md).
  std::optional<double> gpu_speed_spread;

  int total_gpus() const;
};

// Where each GPU lives. Global GPU ids enumerate nodes in group order, then
// local index; GPU types are deduplicated so costs are computed once per type.
class Cluster {
 public:
  explicit Cluster(ClusterSpec spec);

  const ClusterSpec& spec() const { return spec_; }
  int num_gpus() const { return num_gpus_; }
  int num_nodes() const { return num_nodes_; }
  // With one node size (every group's GPUs per node alike) a GPU's node is
  // its id divided by that size, without a table of every GPU.
  int node_of(int gpu) const {
    if (node_shift_ >= 0) return gpu >> node_shift_;
    if (gpus_per_node_ > 0) return gpu / gpus_per_node_;
    return node_of_gpu_[gpu];
  }
  const NodeSpec& node_spec(int node) const { return spec_.groups[nodes_.empty() ? 0 : nodes_[node]].node; }
  const NodeSpec& node_spec_of_gpu(int gpu) const { return node_spec(node_of(gpu)); }
  // Every node's GPU count where all nodes have the same, else 0.
  int uniform_gpus_per_node() const { return gpus_per_node_; }
  // Dense id of the GPU's type (0..num_gpu_types-1).
  int gpu_type_of(int gpu) const { return gpu_type_of_gpu_.empty() ? 0 : gpu_type_of_gpu_[gpu]; }
  int num_gpu_types() const { return static_cast<int>(gpu_types_.size()); }
  const GpuSpec& gpu_type(int type) const { return gpu_types_[type]; }
  // The type a slowed GPU's type was made from (itself for a type of the catalog):
  // what the network sees, since a slowdown changes no figure of its links.
  int base_gpu_type(int type) const { return base_type_[type]; }

 private:
  ClusterSpec spec_;
  int num_gpus_ = 0, num_nodes_ = 0;
  int gpus_per_node_ = 0;             // every node's GPU count where all are alike, else 0
  int node_shift_ = -1;               // log2 of gpus_per_node_ where it is a power of two, else -1
  std::vector<int> nodes_;            // node -> group index; empty with one group (group 0)
  std::vector<int> node_of_gpu_;      // gpu -> node; empty where gpus_per_node_ > 0
  std::vector<int> gpu_type_of_gpu_;  // gpu -> dense type id; empty with one type (type 0)
  std::vector<GpuSpec> gpu_types_;
  std::vector<int> base_type_;  // type -> the unslowed type it was made from
};

// JSON presets compiled into the binary (topologies/catalog/*.json).
std::span<const EmbeddedFile> topology_catalog_files();

}  // namespace trainsim
