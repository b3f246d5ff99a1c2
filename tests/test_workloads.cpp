// The GNN, DLRM and trace workloads below the front end: their arithmetic
// (halo estimate, sharding search) and the plans they build.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/executor.hpp"
#include "sim/platform.hpp"
#include "workloads/chakra_trace.hpp"
#include "workloads/dlrm.hpp"
#include "workloads/gnn.hpp"

using namespace trainsim;

namespace {

ClusterSpec dgx_h100(int nodes) {
  ClusterSpec c;
  NodeGroup g;
  g.node.name = "test-node";
  g.node.gpu.name = "test-gpu";
  g.node.gpu.peak_flops[static_cast<std::size_t>(Dtype::FP32)] = 67e12;
  g.node.gpu.peak_flops[static_cast<std::size_t>(Dtype::FP16)] = 989e12;
  g.node.gpu.peak_flops[static_cast<std::size_t>(Dtype::BF16)] = 989e12;
  g.node.gpu.memory_bytes = 80e9;
  g.node.gpu.memory_bandwidth = 3.35e12;
  g.node.gpus_per_node = 8;
  g.node.scaleup_bandwidth = 450e9;
  g.node.nic_count = 8;
  g.node.nic_bandwidth = 50e9;
  g.count = nodes;
  c.groups.push_back(g);
  return c;
}

std::vector<CalibrationProfile> ideal_profile() {
  CalibrationProfile p;
  p.gpu = "test-gpu";
  p.scaleup.busbw_efficiency.value = p.network.busbw_efficiency.value = 1.0;
  return {p};
}

double iteration(const Workload& w, int ranks, int nodes) {
  const Platform platform(dgx_h100(nodes), ideal_profile());
  ParallelSpec par;
  par.dp = ranks;
  const WorkloadPlan plan = w.plan(platform, Placement::of(par), PlanOptions{});
  Executor exec(plan.setup, platform.cluster(), platform.costs(), platform.analytical_network());
  const SimulationResult r = exec.run();
  REQUIRE(r.completed);
  return r.makespan.to_seconds();
}

GnnSpec products(int parts) {
  GnnSpec s;
  s.graph = *find_graph_preset("ogbn-products");
  s.layers = 3;
  s.hidden = 256;
  s.partitions = parts;
  s.edge_cut = random_partition_edge_cut(parts);
  return s;
}

}  // namespace

TEST_CASE("GNN halo: distinct boundary nodes grow with the edge cut and never exceed the other partitions' nodes") {
  GnnSpec s = products(8);
  const double others = s.graph.nodes - s.graph.nodes / 8.0;
  const double h = estimated_halo_nodes(s);
  CHECK(h > 0);
  CHECK(h <= others);
  s.edge_cut = 0.1;  // a METIS-like partition cuts fewer edges
  CHECK(estimated_halo_nodes(s) < h);
  s.halo_nodes = 1234;  // a measured count wins
  CHECK(estimated_halo_nodes(s) == 1234);
  CHECK(estimated_halo_nodes(products(1)) == 0);
  CHECK(random_partition_edge_cut(4) == doctest::Approx(0.75));
}

TEST_CASE("GNN: partitions split the work, PipeGCN hides the halo exchange, and GAT costs more than GraphSAGE") {
  const double one = iteration(GnnWorkload(products(1)), 1, 1);
  const double eight = iteration(GnnWorkload(products(8)), 8, 1);
  CHECK(eight < one);  // an eighth of the aggregation each, plus the exchange
  CHECK(eight > one / 8);
  GnnSpec pipe = products(8);
  pipe.pipelined = true;
  CHECK(iteration(GnnWorkload(pipe), 8, 1) < eight);
  GnnSpec gat = products(8);
  gat.model = GnnModel::Gat;
  gat.heads = 4;
  gat.hidden = 64;
  CHECK(iteration(GnnWorkload(gat), 8, 1) > eight);
  // Across nodes the exchange runs on the NICs, slower than NVLink.
  CHECK(iteration(GnnWorkload(products(16)), 16, 2) > iteration(GnnWorkload(products(8)), 8, 1) / 2);
}

TEST_CASE("GNN plan: epochs as the unit, every partition simulated, memory per partition") {
  const Platform platform(dgx_h100(1), ideal_profile());
  ParallelSpec par;
  par.dp = 8;
  const WorkloadPlan plan = GnnWorkload(products(8)).plan(platform, Placement::of(par), PlanOptions{});
  CHECK(plan.throughput_unit == "epochs");
  CHECK(plan.units_per_iteration == 1);
  CHECK(plan.setup.ranks.size() == 8);
  REQUIRE(plan.stages.size() == 1);
  // At least the partition's input features and graph structure.
  CHECK(plan.stages[0].memory.buffers > 2449029.0 / 8 * 100 * 4);
  CHECK(plan.model_flops > 0);
}

TEST_CASE("DLRM sharding: every table's columns placed once, replicated below the threshold, within memory") {
  DlrmSpec s = dlrm_dcnv2_mlperf();
  s.global_batch = 65536;
  s.data_parallel_threshold_bytes = 13.4e6;
  ShardingCosts c;
  c.hbm_bandwidth = 3.35e12;
  c.network_bandwidth = 50e9;
  c.memory_per_rank = 40e9;
  const ShardingPlan plan = plan_sharding(s, 64, c);
  std::vector<double> columns(s.tables.size(), 0);
  for (const TableShard& sh : plan.shards) columns[sh.table] += sh.rank >= 0 ? sh.columns : s.tables[sh.table].dim;
  for (std::size_t t = 0; t < s.tables.size(); ++t) CHECK(columns[t] == doctest::Approx(s.tables[t].dim));
  for (std::size_t t = 0; t < s.tables.size(); ++t) {
    const double bytes = s.tables[t].rows * 128.0 * (4 + 4 * s.optimizer_state_per_element);
    if (bytes <= 13.4e6) CHECK(plan.kind_of_table[t] == EmbeddingSharding::DataParallel);
  }
  for (double b : plan.rank_bytes) CHECK(b <= c.memory_per_rank);
  // Forced table-wise: one whole shard per table.
  s.sharding = EmbeddingSharding::TableWise;
  const ShardingPlan tw = plan_sharding(s, 64, c);
  CHECK(tw.shards.size() == s.tables.size());
  // Narrow tables (fewer than 16 columns) still have a table-wise option.
  for (EmbeddingTable& t : s.tables) t.dim = 8;
  CHECK(plan_sharding(s, 64, c).shards.size() == s.tables.size());
  s.sharding = EmbeddingSharding::Auto;
  CHECK(plan_sharding(s, 64, c).kind_of_table.size() == s.tables.size());
}

TEST_CASE("DLRM sharding on several nodes: tables row-wise over node groups, never two shards of one on a node") {
  DlrmSpec s = dlrm_dcnv2_mlperf();
  s.global_batch = 135168;
  s.data_parallel_threshold_bytes = 13.4e6;
  ShardingCosts c;
  c.hbm_bandwidth = 3.35e12;
  c.network_bandwidth = 50e9;
  c.memory_per_rank = 40e9;
  c.scaleup_bandwidth = 450e9;
  c.ranks_per_node = 8;
  const ShardingPlan plan = plan_sharding(s, 128, c);
  const int nt = static_cast<int>(s.tables.size());
  std::vector<double> rows(nt, 0);  // share of each table's rows over all holders
  std::vector<int> node_shards(nt, 0);
  std::vector<std::vector<int>> on_node(16, std::vector<int>(nt, 0));
  for (const TableShard& sh : plan.shards) {
    if (plan.kind_of_table[sh.table] != EmbeddingSharding::TableRowWise) continue;
    REQUIRE(sh.node >= 0);
    REQUIRE(sh.node < 16);
    rows[sh.table] += sh.row_share * 8;
    ++node_shards[sh.table];
    ++on_node[sh.node][sh.table];
  }
  for (int t = 0; t < nt; ++t) {
    const double bytes = s.tables[t].rows * 128.0 * 8;
    if (bytes <= 13.4e6) {
      CHECK(plan.kind_of_table[t] == EmbeddingSharding::DataParallel);
    } else {
      // Every large table row-wise over whole nodes: all its rows, once.
      CHECK(plan.kind_of_table[t] == EmbeddingSharding::TableRowWise);
      CHECK(rows[t] == doctest::Approx(1.0));
    }
  }
  for (const auto& node : on_node) CHECK(*std::max_element(node.begin(), node.end()) <= 1);
  // The hottest table (100 lookups a sample) spreads over more nodes than a one-hot table of the same size.
  CHECK(node_shards[20] > node_shards[9]);
  for (double b : plan.rank_bytes) CHECK(b <= c.memory_per_rank);
  // One node: no hierarchy to exploit unless asked for; asked for, every table row-wise over the node.
  c.ranks_per_node = 0;
  for (EmbeddingSharding k : plan_sharding(s, 8, c).kind_of_table) CHECK(k != EmbeddingSharding::TableRowWise);
  s.sharding = EmbeddingSharding::TableRowWise;
  const ShardingPlan forced = plan_sharding(s, 8, c);
  CHECK(forced.shards.size() == s.tables.size());
  for (const TableShard& sh : forced.shards) CHECK(sh.row_share == doctest::Approx(1.0 / 8));
}

TEST_CASE("DLRM on 16 nodes: the hierarchical exchange beats a flat all-to-all over every GPU") {
  DlrmSpec s = dlrm_dcnv2_mlperf();
  s.global_batch = 135168;
  s.data_parallel_threshold_bytes = 13.4e6;
  const double hierarchical = iteration(DlrmWorkload(s), 128, 16);
  s.sharding = EmbeddingSharding::ColumnWise;
  const double flat = iteration(DlrmWorkload(s), 128, 16);
  CHECK(hierarchical < flat);
  // The same workload scales: twice the nodes, less time per global batch.
  s.sharding = EmbeddingSharding::Auto;
  CHECK(hierarchical < iteration(DlrmWorkload(s), 64, 8));
}

TEST_CASE("DLRM: samples as the unit, more GPUs take less time per global batch") {
  DlrmSpec s = dlrm_dcnv2_mlperf();
  s.optimizer_state_per_element = 1.0 / 128;
  s.global_batch = 65536;
  const double eight = iteration(DlrmWorkload(s), 8, 1);
  const double sixteen = iteration(DlrmWorkload(s), 16, 2);
  CHECK(sixteen < eight);
}

TEST_CASE("Trace replay: measured durations, dependencies and collectives re-costed per group size") {
  TraceSpec t;
  t.file = "t.json";
  TraceNode a;
  a.name = "fwd";
  a.duration_s = 1e-3;
  TraceNode ar;
  ar.name = "grads";
  ar.collective = true;
  ar.comm_bytes = 1 << 28;
  ar.group = TraceGroup::DP;
  ar.deps = {0};
  TraceNode b;
  b.name = "step";
  b.duration_s = 2e-4;
  b.deps = {1};
  t.nodes = {a, ar, b};
  t.samples_per_replica = 8;
  const double two = iteration(TraceWorkload(t), 2, 1);
  const double sixteen = iteration(TraceWorkload(t), 16, 2);
  CHECK(two > 1.2e-3);   // compute, then the all-reduce, then compute
  CHECK(sixteen > two);  // the all-reduce crosses the NICs
  t.nodes[1].comm_bytes = 0;
  CHECK(iteration(TraceWorkload(t), 2, 1) == doctest::Approx(1.2e-3).epsilon(0.05));
}
