#pragma once
// Recommendation training (DLRM, Naumov et al. 2019; DLRM-DCNv2, MLPerf):
// embedding tables sharded table-wise, row-wise, column-wise or data-parallel
// over the GPUs, lookups as memory-bound work, the pooled embeddings moved by
// an all-to-all forward and backward (a reduce-scatter for row-wise shards),
// dense MLPs and the feature interaction data-parallel. A greedy sharding
// search in the style of TorchRec's planner places the tables; on several
// nodes it may place a table on a group of nodes, row-wise over their GPUs,
// with hierarchical communication (TorchRec's table-row-wise, HugeCTR's
// hier_auto plan).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/workload.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

struct EmbeddingTable {
  std::int64_t rows = 0;
  int dim = 0;
  double pooling = 1;  // lookups per sample (multi-hot size)
};

enum class EmbeddingSharding : std::uint8_t { Auto, TableWise, RowWise, ColumnWise, DataParallel, TableRowWise };
const char* to_string(EmbeddingSharding s);

enum class DlrmInteraction : std::uint8_t { Dot, Dcnv2 };

struct DlrmSpec {
  std::string name = "dlrm";
  std::vector<EmbeddingTable> tables;
  int dense_features = 13;
  std::vector<int> bottom_mlp;  // output sizes; the last equals the embedding dimension
  std::vector<int> top_mlp;     // output sizes; the last is 1 (the click logit)
  DlrmInteraction interaction = DlrmInteraction::Dot;
  int cross_layers = 0;                    // DCNv2
  int cross_rank = 0;                      // DCNv2 low-rank projection (0 = full rank)
  Dtype precision = Dtype::FP16;           // MLPs and the pooled embeddings on the wire
  Dtype embedding_dtype = Dtype::FP32;     // table storage
  double optimizer_state_per_element = 1;  // embedding optimizer state per table element (Adagrad: 1)
  EmbeddingSharding sharding = EmbeddingSharding::Auto;
  double data_parallel_threshold_bytes = 0;  // Auto: tables at most this big are replicated
  std::int64_t global_batch = 0;
};

// The MLPerf Training DLRM-DCNv2 model (Criteo 1TB multi-hot).
DlrmSpec dlrm_dcnv2_mlperf();

// Where the shards of each table live.
struct TableShard {
  int table = 0;
  int rank = -1;         // -1: every rank (data-parallel, or row-wise over all ranks), or every rank of `node`
  double columns = 0;    // embedding columns of this shard
  double row_share = 1;  // share of the table's rows each holder has (row-wise: 1/ranks)
  int node = -1;         // table-row-wise: the node whose ranks share this shard's rows
};
struct ShardingPlan {
  std::vector<EmbeddingSharding> kind_of_table;
  std::vector<TableShard> shards;
  std::vector<double> rank_bytes;  // table and optimizer bytes per rank
};

// Estimated per-rank costs the search balances: lookup and update traffic at
// the GPU's HBM bandwidth, pooled-embedding traffic at its network bandwidth.
// Ranks are numbered node by node, `ranks_per_node` on each (0: all on one
// node); table-row-wise shards move their pooled partial sums over the
// node's scale-up network first, then across nodes on the NICs.
struct ShardingCosts {
  double hbm_bandwidth = 0;      // bytes/s per GPU
  double network_bandwidth = 0;  // bytes/s per GPU (the all-to-all's slowest path)
  double memory_per_rank = 0;    // bytes the tables may use on a GPU
  double scaleup_bandwidth = 0;  // bytes/s per GPU per direction inside a node
  int ranks_per_node = 0;
  // Seconds of a collective of `bytes` (NCCL buffer size) over all ranks, a node's ranks and a
  // rail (one rank per node), as the simulator costs it; unset: bytes over the bandwidths above.
  std::function<double(CollectiveKind, double)> all_ranks, node, rail;
};
ShardingPlan plan_sharding(const DlrmSpec& spec, int ranks, const ShardingCosts& costs);

class DlrmWorkload final : public Workload {
 public:
  explicit DlrmWorkload(DlrmSpec spec) : spec_(std::move(spec)) {}
  std::string name() const override { return spec_.name; }
  WorkloadPlan plan(const Platform& platform, const Placement& placement, const PlanOptions& options) const override;

 private:
  DlrmSpec spec_;
};

}  // namespace trainsim
