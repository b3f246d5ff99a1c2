#pragma once
// Full-graph GNN training over a partitioned graph (GCN, GraphSAGE, GAT), one
// partition per GPU: per layer a halo (boundary-node) exchange as an
// all-to-all, the sparse aggregation as memory-bound work, the dense update
// as GEMMs, then a gradient all-reduce. PipeGCN (Wan et al., ICLR 2022) uses
// stale boundary features, so the exchange overlaps the computation.
#include <cstdint>
#include <string>
#include <vector>

#include "models/workload.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

enum class GnnModel : std::uint8_t { Gcn, GraphSage, Gat };
const char* to_string(GnnModel m);

// A graph by its statistics (edges counted as stored for message passing:
// both directions of an undirected edge).
struct GraphStats {
  std::string name;
  std::int64_t nodes = 0;
  std::int64_t edges = 0;
  int features = 0;
  int classes = 0;
};

struct GnnSpec {
  GnnModel model = GnnModel::GraphSage;
  GraphStats graph;
  int layers = 2;
  int hidden = 256;
  int heads = 1;                 // GAT attention heads (hidden per head)
  int partitions = 1;            // one per GPU
  double edge_cut = 0;           // share of edges whose endpoints lie in different partitions
  std::int64_t halo_nodes = -1;  // boundary nodes a partition receives per layer; -1 = estimated from edge_cut
  bool pipelined = false;        // PipeGCN: stale boundary features, exchange overlapped
  // GCN/GraphSAGE: aggregate the layer's input, then project (the papers' and
  // hand-written layers' order); false: project first where that narrows the
  // features the aggregation moves, as DGL's GraphConv and SAGEConv do.
  bool aggregate_first = false;
  int index_bytes = 8;  // per CSR index: 8 (int64, the frameworks' default) or 4 (DGLGraph.int())
  Dtype precision = Dtype::FP32;
};

// Graph presets: Reddit (DGL RedditDataset), ogbn-products, ogbn-papers100M (OGB).
const GraphStats* find_graph_preset(const std::string& name);
std::vector<std::string> graph_preset_names();

// The share of edges a random (hash) partition into p parts cuts: 1 - 1/p.
double random_partition_edge_cut(int partitions);
// Distinct boundary nodes one partition receives: the cut edges entering it
// with sources spread uniformly over the other partitions' nodes.
double estimated_halo_nodes(const GnnSpec& spec);

class GnnWorkload final : public Workload {
 public:
  explicit GnnWorkload(GnnSpec spec) : spec_(std::move(spec)) {}
  std::string name() const override;
  WorkloadPlan plan(const Platform& platform, const Placement& placement, const PlanOptions& options) const override;

 private:
  GnnSpec spec_;
};

}  // namespace trainsim
