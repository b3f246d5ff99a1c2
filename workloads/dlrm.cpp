#include "workloads/dlrm.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "sim/check.hpp"
#include "workloads/spmd_plan.hpp"

namespace trainsim {

const char* to_string(EmbeddingSharding s) {
  switch (s) {
    case EmbeddingSharding::Auto:
      return "auto";
    case EmbeddingSharding::TableWise:
      return "table-wise";
    case EmbeddingSharding::RowWise:
      return "row-wise";
    case EmbeddingSharding::ColumnWise:
      return "column-wise";
    case EmbeddingSharding::DataParallel:
      return "data-parallel";
    case EmbeddingSharding::TableRowWise:
      return "table-row-wise";
  }
  return "?";
}

DlrmSpec dlrm_dcnv2_mlperf() {
  // MLPerf Training DLRM-DCNv2 on Criteo 1TB multi-hot: table sizes and
  // multi-hot sizes of the reference (mlcommons/training, recommendation_v2
  // torchrec_dlrm: --num_embeddings_per_feature, --multi_hot_sizes), embedding
  // dimension 128, bottom MLP 512-256-128, DCNv2 with 3 cross layers of rank
  // 512, top MLP 1024-1024-512-256-1, Adagrad on the embeddings.
  DlrmSpec s;
  s.name = "dlrm-dcnv2";
  const std::int64_t rows[] = {40000000, 39060,    17295,    7424,     20265,  3,     7122, 1543, 63,
                               40000000, 3067956,  405282,   10,       2209,   11938, 155,  4,    976,
                               14,       40000000, 40000000, 40000000, 590152, 12973, 108,  36};
  const int hot[] = {3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
  for (std::size_t t = 0; t < std::size(rows); ++t) s.tables.push_back(EmbeddingTable{rows[t], 128, double(hot[t])});
  s.dense_features = 13;
  s.bottom_mlp = {512, 256, 128};
  s.top_mlp = {1024, 1024, 512, 256, 1};
  s.interaction = DlrmInteraction::Dcnv2;
  s.cross_layers = 3;
  s.cross_rank = 512;
  return s;
}

namespace {

struct TableTraffic {
  double lookup_bytes = 0;  // forward gathers + pooled writes, per sample, whole table
  double update_bytes = 0;  // backward: pooled gradient read, rows and optimizer state read and written
  double pooled_bytes = 0;  // pooled embedding on the wire per sample (one direction)
};

TableTraffic traffic(const DlrmSpec& s, const EmbeddingTable& t, double columns) {
  const double eb = static_cast<double>(bytes_per_element(s.embedding_dtype));
  const double wb = static_cast<double>(bytes_per_element(s.precision));
  const double sb = 4 * s.optimizer_state_per_element;  // fp32 optimizer state
  TableTraffic tr;
  tr.lookup_bytes = t.pooling * columns * eb + columns * wb;
  tr.update_bytes = columns * wb + t.pooling * columns * (2 * eb + 2 * sb);
  tr.pooled_bytes = columns * wb;
  return tr;
}

double table_bytes(const DlrmSpec& s, const EmbeddingTable& t, double columns, double row_share) {
  const double eb = static_cast<double>(bytes_per_element(s.embedding_dtype));
  return static_cast<double>(t.rows) * row_share * columns * (eb + 4 * s.optimizer_state_per_element);
}

// What the sharding search balances: per rank the HBM time of its lookups and updates, and the
// exchanges every rank waits for: the flat all-to-all (paced by its busiest sender), the row-wise
// tables' reduce-scatter, the hierarchical exchange of table-row-wise partial sums (paced by the
// busiest node) and the replicated tables' gradient all-reduce.
struct SearchState {
  std::vector<double> hbm;       // seconds per rank
  std::vector<double> sent;      // flat all-to-all bytes per rank, one direction
  std::vector<double> partials;  // table-row-wise partial-sum bytes per node, one direction
  std::vector<double> bytes;     // table and optimizer bytes per rank
  double row_wise = 0;           // pooled bytes of the row-wise tables, whole batch
  double replicated = 0;         // gradient bytes of the replicated tables
};

}  // namespace

ShardingPlan plan_sharding(const DlrmSpec& s, int ranks, const ShardingCosts& c) {
  const int nt = static_cast<int>(s.tables.size());
  const double g = static_cast<double>(s.global_batch);
  const double local = g / ranks;
  const int per_node = c.ranks_per_node > 0 && ranks % c.ranks_per_node == 0 ? c.ranks_per_node : ranks;
  const int nodes = ranks / per_node;
  const double hbm_bw = c.hbm_bandwidth;
  const double net_bw = c.network_bandwidth;
  const double scaleup_bw = c.scaleup_bandwidth > 0 ? c.scaleup_bandwidth : c.network_bandwidth;

  auto off_self = [](int n) { return (n - 1.0) / n; };
  auto over_all = [&](CollectiveKind k, double b) {
    if (ranks <= 1 || !(b > 0)) return 0.0;
    if (c.all_ranks) return c.all_ranks(k, b);
    return (k == CollectiveKind::AllReduce ? 2 : off_self(ranks)) * b / net_bw;
  };
  auto over_node = [&](CollectiveKind k, double b) {
    if (per_node <= 1 || !(b > 0)) return 0.0;
    return c.node ? c.node(k, b) : off_self(per_node) * b / scaleup_bw;
  };
  auto over_rail = [&](CollectiveKind k, double b) {
    if (nodes <= 1 || !(b > 0)) return 0.0;
    return c.rail ? c.rail(k, b) : off_self(nodes) * b / net_bw;
  };
  // Estimated embedding time of a state, forward and backward: the busiest rank's HBM time and the exchanges.
  auto estimate = [&](const SearchState& x) {
    const double hier = *std::max_element(x.partials.begin(), x.partials.end());
    double t = *std::max_element(x.hbm.begin(), x.hbm.end());
    t += 2 * over_all(CollectiveKind::AllToAll, *std::max_element(x.sent.begin(), x.sent.end()));
    t += over_all(CollectiveKind::ReduceScatter, x.row_wise) + over_all(CollectiveKind::AllGather, x.row_wise);
    t += over_all(CollectiveKind::AllReduce, x.replicated);
    t += 2 * over_node(CollectiveKind::AllToAll, hier);
    t += 2 * over_rail(CollectiveKind::AllToAll, hier / per_node);
    return t;
  };
  // What one holder of 1/holders of table t's rows adds: HBM time (its share of the gathers and
  // updates, partial sums written and their gradients read for the whole batch), table bytes, and
  // the partial sums its node exchanges.
  struct RowShare {
    double hbm = 0, bytes = 0, partials = 0;
  };
  auto row_share = [&](int t, double holders) {
    const EmbeddingTable& tab = s.tables[t];
    const TableTraffic tr = traffic(s, tab, tab.dim);
    const double moved = tr.lookup_bytes + tr.update_bytes - 2 * tr.pooled_bytes;
    return RowShare{g * (moved / holders + 2 * tr.pooled_bytes) / hbm_bw, table_bytes(s, tab, tab.dim, 1) / holders,
                    g * tr.pooled_bytes};
  };
  // Places table t as `kind` on `where` (ranks, or nodes for table-row-wise) in `shards` shards;
  // returns the work it adds (HBM seconds over all ranks plus its traffic at network speed).
  auto place = [&](int t, EmbeddingSharding kind, const std::vector<int>& where, int shards, SearchState& x,
                   std::vector<TableShard>* out) {
    const EmbeddingTable& tab = s.tables[t];
    const double full = table_bytes(s, tab, tab.dim, 1);
    const TableTraffic tr = traffic(s, tab, tab.dim);
    double added = 0;
    switch (kind) {
      case EmbeddingSharding::DataParallel: {
        const double grads = static_cast<double>(tab.rows) * tab.dim * 4;
        for (int r = 0; r < ranks; ++r) {
          x.hbm[r] += local * (tr.lookup_bytes + tr.update_bytes) / hbm_bw;
          x.bytes[r] += full;
        }
        x.replicated += grads;
        added = ranks * local * (tr.lookup_bytes + tr.update_bytes) / hbm_bw + 2 * grads / net_bw;
        if (out) out->push_back(TableShard{t, -1, double(tab.dim), 1.0});
        break;
      }
      case EmbeddingSharding::RowWise: {
        const RowShare share = row_share(t, ranks);
        for (int r = 0; r < ranks; ++r) {
          x.hbm[r] += share.hbm;
          x.bytes[r] += share.bytes;
        }
        x.row_wise += share.partials;
        added = ranks * share.hbm + 2 * share.partials / net_bw;
        if (out) out->push_back(TableShard{t, -1, double(tab.dim), 1.0 / ranks});
        break;
      }
      case EmbeddingSharding::TableRowWise: {
        const double holders = static_cast<double>(shards) * per_node;
        const RowShare share = row_share(t, holders);
        for (int n : where) {
          for (int r = n * per_node; r < (n + 1) * per_node; ++r) {
            x.hbm[r] += share.hbm;
            x.bytes[r] += share.bytes;
          }
          x.partials[n] += share.partials;
          if (out) out->push_back(TableShard{t, -1, double(tab.dim), 1.0 / holders, n});
        }
        added = holders * share.hbm + 2 * shards * share.partials / per_node / net_bw;
        break;
      }
      default: {  // table-wise (one shard) or column-wise
        const double cols = double(tab.dim) / shards;
        const TableTraffic part = traffic(s, tab, cols);
        for (int r : where) {
          const double h = g * (part.lookup_bytes + part.update_bytes) / hbm_bw;
          x.hbm[r] += h;
          x.sent[r] += g * part.pooled_bytes;
          x.bytes[r] += full / shards;
          added += h + 2 * g * part.pooled_bytes / net_bw;
          if (out) out->push_back(TableShard{t, r, cols, 1.0});
        }
        break;
      }
    }
    return added;
  };
  auto least_loaded = [&](const SearchState& st, int count) {  // the `count` ranks of least HBM and sending time
    std::vector<double> load(ranks, 0);
    for (int r = 0; r < ranks; ++r) load[r] = st.hbm[r] + st.sent[r] / net_bw;
    std::vector<int> idx(ranks);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return load[a] < load[b]; });
    idx.resize(count);
    return idx;
  };

  const bool any = s.sharding == EmbeddingSharding::Auto;
  auto replicated = [&](int t) {
    return any && table_bytes(s, s.tables[t], s.tables[t].dim, 1) <= s.data_parallel_threshold_bytes;
  };
  auto fresh = [&]() {
    SearchState x;
    x.hbm.assign(ranks, 0);
    x.sent.assign(ranks, 0);
    x.partials.assign(nodes, 0);
    x.bytes.assign(ranks, 0);
    return x;
  };
  auto fits = [&](const SearchState& x) {
    return *std::max_element(x.bytes.begin(), x.bytes.end()) <= c.memory_per_rank;
  };

  // The flat plan: the heaviest tables first (their table-wise time), each where it raises the
  // estimate least, as TorchRec's greedy proposer does.
  auto flat_plan = [&](ShardingPlan& plan) {
    SearchState st = fresh();
    plan.kind_of_table.assign(nt, EmbeddingSharding::TableWise);
    std::vector<int> order(nt);
    std::iota(order.begin(), order.end(), 0);
    auto tw_time = [&](int t) {
      const TableTraffic tr = traffic(s, s.tables[t], s.tables[t].dim);
      return g * (tr.lookup_bytes + tr.update_bytes) / hbm_bw + 2 * g * tr.pooled_bytes / net_bw;
    };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return tw_time(a) > tw_time(b); });
    for (int t : order) {
      const EmbeddingTable& tab = s.tables[t];
      const EmbeddingSharding kind = replicated(t) ? EmbeddingSharding::DataParallel : s.sharding;
      const bool open = kind == EmbeddingSharding::Auto;
      struct Option {
        EmbeddingSharding kind;
        std::vector<int> where;
        int shards = 1;
        double estimate = 0;
        double added = 0;
      };
      std::vector<Option> options;
      auto consider = [&](EmbeddingSharding k, std::vector<int> where, int shards, bool must_fit) {
        SearchState x = st;
        const double added = place(t, k, where, shards, x, nullptr);
        if (fits(x) || !must_fit) options.push_back(Option{k, std::move(where), shards, estimate(x), added});
      };
      if (kind == EmbeddingSharding::DataParallel || kind == EmbeddingSharding::RowWise || open) {
        consider(open ? EmbeddingSharding::RowWise : kind, {}, 1, false);
      }
      // Table-wise (one shard) or column-wise (k shards of at least 16 columns) on the least loaded ranks.
      for (int k = 1; k <= ranks && kind != EmbeddingSharding::DataParallel && kind != EmbeddingSharding::RowWise;
           k *= 2) {
        if (k > 1 && tab.dim / k < 16) break;
        if (k > 1 && kind == EmbeddingSharding::TableWise) break;
        if (k == 1 && kind == EmbeddingSharding::ColumnWise && ranks > 1 && tab.dim >= 64) continue;
        consider(k == 1 ? EmbeddingSharding::TableWise : EmbeddingSharding::ColumnWise, least_loaded(st, k), k, open);
      }
      TRAINSIM_CHECK(!options.empty(), "a sharding option for every table");
      const Option* best = &options.front();
      for (const Option& o : options) {
        const bool lower = o.estimate < best->estimate * (1 - 1e-9);
        const bool tie = !lower && o.estimate <= best->estimate * (1 + 1e-9);
        if (lower || (tie && o.added < best->added)) best = &o;
      }
      plan.kind_of_table[t] = best->kind;
      place(t, best->kind, best->where, best->shards, st, &plan.shards);
    }
    plan.rank_bytes = st.bytes;
    return estimate(st);
  };

  // The hierarchical plan for `splits` (shards per model-parallel table): each shard row-wise over
  // one node's ranks, the heaviest shards first, each on the node it leaves least loaded, never two
  // shards of one table on a node (HugeCTR's hier_auto planner). Returns the estimate, or the
  // table that fits on no node.
  auto exchange = [&](double partials) {
    return 2 * over_node(CollectiveKind::AllToAll, partials) +
           2 * over_rail(CollectiveKind::AllToAll, partials / per_node);
  };
  auto shard_weight = [&](int t, int k) {
    const TableTraffic tr = traffic(s, s.tables[t], s.tables[t].dim);
    return (tr.lookup_bytes + tr.update_bytes - 2 * tr.pooled_bytes) / k + 2 * tr.pooled_bytes;
  };
  auto hier_plan = [&](const std::vector<int>& splits, ShardingPlan& plan, int& unplaced) {
    SearchState st = fresh();
    plan = ShardingPlan{};
    plan.kind_of_table.assign(nt, EmbeddingSharding::TableRowWise);
    std::vector<std::pair<int, int>> shards;  // (table, shard)
    for (int t = 0; t < nt; ++t) {
      if (replicated(t)) {
        plan.kind_of_table[t] = EmbeddingSharding::DataParallel;
        place(t, EmbeddingSharding::DataParallel, {}, 1, st, &plan.shards);
        continue;
      }
      for (int i = 0; i < splits[t]; ++i) shards.emplace_back(t, i);
    }
    std::stable_sort(shards.begin(), shards.end(), [&](const auto& a, const auto& b) {
      return shard_weight(a.first, splits[a.first]) > shard_weight(b.first, splits[b.first]);
    });
    std::vector<std::vector<char>> holds(nodes, std::vector<char>(nt, 0));
    for (const auto& [t, i] : shards) {
      int best = -1;
      double best_cost = 0;
      const RowShare share = row_share(t, static_cast<double>(splits[t]) * per_node);
      for (int n = 0; n < nodes; ++n) {
        const int r = n * per_node;  // every rank of a node holds the same shards
        if (holds[n][t] || (any && st.bytes[r] + share.bytes > c.memory_per_rank)) continue;
        const double cost = st.hbm[r] + share.hbm + exchange(st.partials[n] + share.partials);
        if (best < 0 || cost < best_cost * (1 - 1e-9)) best = n, best_cost = cost;
      }
      if (best < 0) {
        unplaced = t;
        return std::numeric_limits<double>::infinity();
      }
      holds[best][t] = 1;
      place(t, EmbeddingSharding::TableRowWise, {best}, splits[t], st, &plan.shards);
    }
    plan.rank_bytes = st.bytes;
    return estimate(st);
  };

  ShardingPlan best;
  double best_estimate = std::numeric_limits<double>::infinity();
  if (s.sharding != EmbeddingSharding::TableRowWise) best_estimate = flat_plan(best);
  if (s.sharding == EmbeddingSharding::TableRowWise || (any && nodes > 1)) {
    // Start with one shard per table; after each plan split the heaviest shard (or the one that did
    // not fit) in two, up to one shard per node; 20 rounds, as HugeCTR's planner (max_search_iter).
    std::vector<int> splits(nt, 1);
    for (int round = 0; round < 20; ++round) {
      ShardingPlan p;
      int unplaced = -1;
      const double e = hier_plan(splits, p, unplaced);
      if (e < best_estimate * (1 - 1e-9)) best = std::move(p), best_estimate = e;
      int split = unplaced;
      if (split < 0) {
        double heaviest = 0;
        for (int t = 0; t < nt; ++t) {
          if (replicated(t) || splits[t] * 2 > nodes) continue;
          const double w = shard_weight(t, splits[t]);
          if (split < 0 || w > heaviest) split = t, heaviest = w;
        }
      }
      if (split < 0 || splits[split] * 2 > nodes) break;
      splits[split] *= 2;
    }
  }
  TRAINSIM_CHECK(!best.kind_of_table.empty(), "a sharding plan that fits");
  return best;
}

WorkloadPlan DlrmWorkload::plan(const Platform& platform, const Placement& placement,
                                const PlanOptions& /*options*/) const {
  const DlrmSpec& s = spec_;
  const int ranks = placement.ranks();
  const Cluster& cluster = platform.cluster();
  const double g = static_cast<double>(s.global_batch);
  const double bsz = g / ranks;  // samples per rank
  const Dtype dt = s.precision;
  const double wb = static_cast<double>(bytes_per_element(dt));

  const int gpu0 = placement.gpu(RankCoord{});
  const GpuSpec& gpu = cluster.gpu_type(cluster.gpu_type_of(gpu0));
  const NodeSpec& node = cluster.node_spec(cluster.node_of(gpu0));
  ShardingCosts costs;
  costs.hbm_bandwidth = gpu.memory_bandwidth;
  costs.network_bandwidth = cluster.num_nodes() > 1 ? node.nic_bandwidth_per_gpu() : node.scaleup_bandwidth;
  if (costs.network_bandwidth <= 0) costs.network_bandwidth = node.scaleup_bandwidth;
  // Half of the GPU for tables and their optimizer state; the rest for the dense part, activations and buffers.
  costs.memory_per_rank = gpu.memory_bytes / 2;
  costs.scaleup_bandwidth = node.scaleup_bandwidth;
  // Ranks per node, when every node holds the same number of consecutive ranks (else every
  // rank counts as its own node: table-row-wise shards then exchange over the network only).
  std::vector<int> all_gpus(ranks), node_of_rank(ranks);
  for (int r = 0; r < ranks; ++r) {
    all_gpus[r] = placement.gpu(RankCoord{0, 0, 0, r, 0});
    node_of_rank[r] = cluster.node_of(all_gpus[r]);
  }
  int per_node = static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.end(), node_of_rank[0]));
  for (int r = 0; r < ranks && per_node > 1; ++r) {
    const bool first = r % per_node == 0;
    if (ranks % per_node != 0 || (first && r > 0 && node_of_rank[r] == node_of_rank[r - 1]) ||
        (!first && node_of_rank[r] != node_of_rank[r - 1]))
      per_node = 1;
  }
  costs.ranks_per_node = per_node;
  const int nodes = ranks / per_node;
  // The search prices the exchanges as the analytical network model does.
  std::vector<int> node_gpus(per_node), rail_gpus(nodes);
  for (int l = 0; l < per_node; ++l) node_gpus[l] = all_gpus[l];
  for (int n = 0; n < nodes; ++n) rail_gpus[n] = all_gpus[n * per_node];
  const AnalyticalNetwork& net = platform.analytical_network();
  auto priced = [&net](const std::vector<int>& gpus) {
    return [&net, shape = net.shape(gpus)](CollectiveKind k, double bytes) {
      return net.collective_seconds(shape, k, bytes);
    };
  };
  costs.all_ranks = priced(all_gpus);
  costs.node = priced(node_gpus);
  costs.rail = priced(rail_gpus);
  const ShardingPlan sharding = plan_sharding(s, ranks, costs);

  // Dense layers: (inputs, outputs) of every Linear, bottom then top.
  std::vector<std::pair<int, int>> bottom, top;
  int in = s.dense_features;
  for (int o : s.bottom_mlp) bottom.emplace_back(std::exchange(in, o), o);
  const int tables = static_cast<int>(s.tables.size());
  const int dim = s.bottom_mlp.empty() ? s.dense_features : s.bottom_mlp.back();
  const int features = s.interaction == DlrmInteraction::Dcnv2 ? dim * (tables + 1) : (tables + 1) * tables / 2 + dim;
  in = features;
  for (int o : s.top_mlp) top.emplace_back(std::exchange(in, o), o);
  double dense_params = 0;
  for (const auto& [i, o] : bottom) dense_params += double(i) * o + o;
  for (const auto& [i, o] : top) dense_params += double(i) * o + o;
  const int rank_ = s.cross_rank > 0 ? s.cross_rank : features;
  if (s.interaction == DlrmInteraction::Dcnv2) dense_params += s.cross_layers * (2.0 * features * rank_ + features);
  double dp_table_bytes = 0;                    // gradients of replicated tables, all-reduced with the dense ones
  double pooled_rw = 0;                         // pooled bytes per sample of row-wise tables
  std::vector<double> node_partials(nodes, 0);  // pooled partial sums of each node's table-row-wise shards
  for (const TableShard& sh : sharding.shards) {
    if (sh.rank >= 0) continue;
    const EmbeddingTable& t = s.tables[sh.table];
    const EmbeddingSharding kind = sharding.kind_of_table[sh.table];
    if (kind == EmbeddingSharding::DataParallel) {
      dp_table_bytes += double(t.rows) * t.dim * 4;
    } else if (kind == EmbeddingSharding::TableRowWise) {
      node_partials[sh.node] += g * traffic(s, t, sh.columns).pooled_bytes;
    } else {
      pooled_rw += traffic(s, t, t.dim).pooled_bytes;
    }
  }
  // The busiest node's partial sums set the pace of the hierarchical exchange: an all-to-all inside
  // the node (every rank writes each partial sum straight into the rank that keeps the samples of
  // its rail, HugeCTR's peer-access IntraModelForward; backward, IntraModelBackward reads the
  // gradients back), then an all-to-all along the rail.
  const double partials = *std::max_element(node_partials.begin(), node_partials.end());
  // The busiest rank's pooled output (the all-to-all's pace): table-wise and column-wise shards.
  std::vector<double> sent(ranks, 0);
  for (const TableShard& sh : sharding.shards) {
    if (sh.rank >= 0) sent[sh.rank] += g * traffic(s, s.tables[sh.table], sh.columns).pooled_bytes;
  }
  const double a2a_bytes = *std::max_element(sent.begin(), sent.end());

  SpmdRanks out;
  out.rank_label = "rank";
  double flops_all = 0;
  for (int r = 0; r < ranks; ++r) {
    // Embedding work of this rank.
    double lookup = 0, update = 0;
    for (const TableShard& sh : sharding.shards) {
      if (sh.rank >= 0 && sh.rank != r) continue;
      if (sh.node >= 0 && sh.node != r / per_node) continue;
      const TableTraffic tr = traffic(s, s.tables[sh.table], sh.columns);
      const bool dp = sharding.kind_of_table[sh.table] == EmbeddingSharding::DataParallel;
      const double samples = dp ? bsz : g;
      // Row-wise: a rank gathers the rows it holds (its row share of the lookups) and writes partial sums for every
      // sample.
      lookup += samples * (tr.lookup_bytes - tr.pooled_bytes) * sh.row_share + samples * tr.pooled_bytes;
      update += samples * (tr.update_bytes - tr.pooled_bytes) * sh.row_share + samples * tr.pooled_bytes;
    }
    ProgramBuilder pb("rank");
    const std::uint8_t compute = pb.add_stream("compute");
    const std::uint8_t a2a = pb.add_stream("embeddings");
    const std::uint8_t grad = pb.add_stream("dp");
    const std::uint32_t slot = pb.add_comm_slot("all");
    const std::uint32_t node_slot = pb.add_comm_slot("node");
    const std::uint32_t rail_slot = pb.add_comm_slot("rail");
    double flops = 0;
    auto run = [&](ComputeOp op, std::vector<TaskId> deps) {
      flops += op.flops;
      const std::uint32_t label = pb.add_label(op.name);
      return pb.compute(compute, pb.add_op(std::move(op)), label, -1, deps);
    };
    auto coll_on = [&](std::uint32_t on, std::uint8_t stream, CollectiveKind kind, CommClass cls, double bytes,
                       const std::string& name, std::vector<TaskId> deps) {
      return pb.collective(stream, on, kind, cls, task_bytes(std::round(bytes)), pb.add_label(name), -1, deps);
    };
    auto coll = [&](std::uint8_t stream, CollectiveKind kind, CommClass cls, double bytes, const std::string& name,
                    std::vector<TaskId> deps) {
      return coll_on(slot, stream, kind, cls, bytes, name, std::move(deps));
    };
    std::vector<TaskId> none;
    const TaskId emb = run(memory_op("embedding.lookup", lookup), none);
    std::vector<TaskId> pooled = {emb};
    if (ranks > 1 && a2a_bytes > 0)
      pooled.push_back(coll(a2a, CollectiveKind::AllToAll, CommClass::EP, a2a_bytes, "embeddings.a2a.fwd", {emb}));
    if (ranks > 1 && pooled_rw > 0)
      pooled.push_back(
          coll(a2a, CollectiveKind::ReduceScatter, CommClass::EP, g * pooled_rw, "embeddings.rw.fwd", {emb}));
    if (partials > 0) {
      TaskId h = emb;
      if (per_node > 1)
        h = coll_on(node_slot, a2a, CollectiveKind::AllToAll, CommClass::EP, partials, "embeddings.node.fwd", {h});
      if (nodes > 1)
        h = coll_on(rail_slot, a2a, CollectiveKind::AllToAll, CommClass::EP, partials / per_node, "embeddings.rail.fwd",
                    {h});
      pooled.push_back(h);
    }
    TaskId last = emb;
    for (std::size_t i = 0; i < bottom.size(); ++i) {
      last = run(gemm_op("bottom." + std::to_string(i) + ".fwd", bsz, bottom[i].second, bottom[i].first, dt), {last});
      last = run(memory_op("bottom." + std::to_string(i) + ".relu", bsz * bottom[i].second * wb * 2), {last});
    }
    pooled.push_back(last);
    // Interaction.
    auto interaction = [&](const char* pass, std::vector<TaskId> deps) {
      TaskId t = 0;
      if (s.interaction == DlrmInteraction::Dcnv2) {
        for (int l = 0; l < s.cross_layers; ++l) {
          const std::string p = std::string("cross.") + std::to_string(l) + "." + pass;
          const double mult = std::string(pass) == "bwd" ? 2 : 1;  // dgrad and wgrad
          ComputeOp u = gemm_op(p + ".u", bsz, rank_, features, dt);
          ComputeOp v = gemm_op(p + ".v", bsz, features, rank_, dt);
          u.flops *= mult, v.flops *= mult, u.bytes *= mult, v.bytes *= mult;
          u.kernels = v.kernels = static_cast<int>(mult);
          t = run(std::move(u), deps);
          t = run(std::move(v), {t});
          // x0 * (.) + x_l: read three, write one.
          t = run(memory_op(p + ".combine", bsz * features * wb * 4 * mult), {t});
          deps = {t};
        }
      } else {
        ComputeOp bmm = gemm_op(std::string("interaction.") + pass, bsz * (tables + 1), tables + 1, dim, dt);
        t = run(std::move(bmm), deps);
      }
      return t;
    };
    last = interaction("fwd", pooled);
    for (std::size_t i = 0; i < top.size(); ++i) {
      last = run(gemm_op("top." + std::to_string(i) + ".fwd", bsz, top[i].second, top[i].first, dt), {last});
      last = run(memory_op("top." + std::to_string(i) + ".act", bsz * top[i].second * wb * 2), {last});
    }
    // Backward.
    for (std::size_t i = top.size(); i-- > 0;) {
      last = run(memory_op("top." + std::to_string(i) + ".act.bwd", bsz * top[i].second * wb * 3), {last});
      last = run(gemm_op("top." + std::to_string(i) + ".dgrad", bsz, top[i].first, top[i].second, dt), {last});
      last = run(gemm_op("top." + std::to_string(i) + ".wgrad", top[i].first, top[i].second, bsz, dt), {last});
    }
    last = interaction("bwd", {last});
    std::vector<TaskId> emb_grads = {last};
    if (ranks > 1 && a2a_bytes > 0)
      emb_grads.push_back(coll(a2a, CollectiveKind::AllToAll, CommClass::EP, a2a_bytes, "embeddings.a2a.bwd", {last}));
    if (ranks > 1 && pooled_rw > 0)
      emb_grads.push_back(
          coll(a2a, CollectiveKind::AllGather, CommClass::EP, g * pooled_rw, "embeddings.rw.bwd", {last}));
    if (partials > 0) {
      TaskId h = last;
      if (nodes > 1)
        h = coll_on(rail_slot, a2a, CollectiveKind::AllToAll, CommClass::EP, partials / per_node, "embeddings.rail.bwd",
                    {h});
      if (per_node > 1)
        h = coll_on(node_slot, a2a, CollectiveKind::AllToAll, CommClass::EP, partials, "embeddings.node.bwd", {h});
      emb_grads.push_back(h);
    }
    for (std::size_t i = bottom.size(); i-- > 0;) {
      last = run(memory_op("bottom." + std::to_string(i) + ".relu.bwd", bsz * bottom[i].second * wb * 3), {last});
      if (i > 0)
        last =
            run(gemm_op("bottom." + std::to_string(i) + ".dgrad", bsz, bottom[i].first, bottom[i].second, dt), {last});
      last = run(gemm_op("bottom." + std::to_string(i) + ".wgrad", bottom[i].first, bottom[i].second, bsz, dt), {last});
    }
    std::vector<TaskId> sync = {last};
    if (ranks > 1) {
      // The dense gradients in the MLPs' precision (HugeCTR's mixed precision all-reduces its fp16
      // weight gradients, Network::exchange_wgrad), the replicated tables' in fp32.
      sync = {coll(grad, CollectiveKind::AllReduce, CommClass::DP, dense_params * wb + dp_table_bytes,
                   "dense.gradients", {last})};
    }
    // The fused embedding backward and optimizer (TorchRec FBGEMM, HugeCTR): after the gradients arrive.
    const TaskId upd = run(memory_op("embedding.update", update), emb_grads);
    sync.push_back(upd);
    // Adagrad on the dense parameters (fp32): read parameter, gradient and state, write parameter and state.
    run(memory_op("dense.optimizer", dense_params * 4 * 5), sync);
    out.programs.push_back(std::move(pb).finish());
    out.program_of_rank.push_back(r);
    MemoryBreakdown m;
    m.weights = sharding.rank_bytes[r] + dense_params * (4 + wb);
    m.gradients = dense_params * 4;
    m.optimizer = dense_params * 4;
    double acts = 0;
    for (const auto& [i, o] : bottom) acts += o;
    for (const auto& [i, o] : top) acts += o;
    acts += features * (2.0 + 2 * s.cross_layers);
    m.activations = bsz * acts * wb * 2;
    m.buffers = 4 * a2a_bytes + g * pooled_rw + 2 * partials;
    out.memory_of_program.push_back(m);
    flops_all += flops;
  }
  // Slot 0: all ranks; 1: the rank's node; 2: its rail (the ranks of its local index on every node).
  for (int n = 0; n < nodes; ++n) {
    std::vector<int> members(per_node);
    std::iota(members.begin(), members.end(), n * per_node);
    out.subgroups.push_back(std::move(members));
  }
  for (int l = 0; l < per_node; ++l) {
    std::vector<int> members;
    for (int n = 0; n < nodes; ++n) members.push_back(n * per_node + l);
    out.subgroups.push_back(std::move(members));
  }
  for (int r = 0; r < ranks; ++r) out.subgroup_of_slot.push_back({-1, r / per_node, nodes + r % per_node});
  WorkloadPlan plan;
  plan_spmd(std::move(out), placement, plan);
  plan.model_flops = plan.hardware_flops = flops_all;
  plan.flop_convention =
      "DLRM: 2mnk per GEMM of the MLPs and the interaction, forward and backward (embedding lookups count no FLOPs)";
  plan.throughput_unit = "samples";
  plan.units_per_iteration = plan.samples_per_iteration = g;
  double emb_bytes = 0;
  for (const EmbeddingTable& t : s.tables) emb_bytes += table_bytes(s, t, t.dim, 1);
  plan.checkpoint_bytes = emb_bytes + dense_params * 8;
  plan.peak_dtype = dt;
  return plan;
}

}  // namespace trainsim
