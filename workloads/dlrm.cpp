#include "workloads/dlrm.hpp"

#include <algorithm>
#include <cmath>
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

}  // namespace

ShardingPlan plan_sharding(const DlrmSpec& s, int ranks, const ShardingCosts& c) {
  const int nt = static_cast<int>(s.tables.size());
  const double g = static_cast<double>(s.global_batch);
  const double local = g / ranks;
  ShardingPlan plan;
  plan.kind_of_table.assign(nt, EmbeddingSharding::TableWise);
  plan.rank_bytes.assign(ranks, 0);
  std::vector<double> load(ranks, 0);  // estimated seconds per rank
  // The heaviest tables first (their table-wise time), as TorchRec's greedy proposer does.
  std::vector<int> order(nt);
  std::iota(order.begin(), order.end(), 0);
  auto tw_time = [&](int t, double cols) {
    const TableTraffic tr = traffic(s, s.tables[t], cols);
    return g * (tr.lookup_bytes + tr.update_bytes) / c.hbm_bandwidth + 2 * g * tr.pooled_bytes / c.network_bandwidth;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return tw_time(a, s.tables[a].dim) > tw_time(b, s.tables[b].dim); });
  auto by_load = [&]() {
    std::vector<int> r(ranks);
    std::iota(r.begin(), r.end(), 0);
    std::stable_sort(r.begin(), r.end(), [&](int a, int b) { return load[a] < load[b]; });
    return r;
  };
  for (int t : order) {
    const EmbeddingTable& tab = s.tables[t];
    const double full = table_bytes(s, tab, tab.dim, 1);
    EmbeddingSharding kind = s.sharding;
    if (kind == EmbeddingSharding::Auto && full <= s.data_parallel_threshold_bytes)
      kind = EmbeddingSharding::DataParallel;
    struct Option {
      EmbeddingSharding kind;
      std::vector<int> ranks;  // shard owners (empty: every rank)
      int shards = 1;
      double max_load = 0;
      double added = 0;  // time added over all ranks (ties go to the least total work)
    };
    std::vector<Option> options;
    const double dp_time =
        local *
            [&] {
              const TableTraffic tr = traffic(s, tab, tab.dim);
              return tr.lookup_bytes + tr.update_bytes;
            }() /
            c.hbm_bandwidth +
        2 * full / (1 + 4 * s.optimizer_state_per_element / bytes_per_element(s.embedding_dtype)) / c.network_bandwidth;
    const double rw_time = [&] {
      const TableTraffic tr = traffic(s, tab, tab.dim);
      return g / ranks * (tr.lookup_bytes + tr.update_bytes) / c.hbm_bandwidth +
             2 * g * tr.pooled_bytes * (ranks - 1) / ranks / c.network_bandwidth;
    }();
    const double max_load = *std::max_element(load.begin(), load.end());
    if (kind == EmbeddingSharding::DataParallel || kind == EmbeddingSharding::RowWise) {
      const double add = kind == EmbeddingSharding::DataParallel ? dp_time : rw_time;
      options.push_back({kind, {}, 1, max_load + add, add * ranks});
    } else {
      if (kind == EmbeddingSharding::Auto) {
        options.push_back({EmbeddingSharding::RowWise, {}, 1, max_load + rw_time, rw_time * ranks});
      }
      // Table-wise (one shard) or column-wise (k shards of at least 32 columns) on the least loaded ranks.
      for (int k = 1; k <= ranks; k *= 2) {
        if (k > 1 && tab.dim / k < 16) break;
        if (k > 1 && kind == EmbeddingSharding::TableWise) break;
        if (k == 1 && kind == EmbeddingSharding::ColumnWise && ranks > 1 && tab.dim >= 64) continue;
        const std::vector<int> ranked = by_load();
        Option o{k == 1 ? EmbeddingSharding::TableWise : EmbeddingSharding::ColumnWise, {}, k, max_load, 0};
        bool fits = true;
        for (int i = 0; i < k; ++i) {
          const int r = ranked[i];
          o.ranks.push_back(r);
          fits = fits && plan.rank_bytes[r] + full / k <= c.memory_per_rank;
          o.max_load = std::max(o.max_load, load[r] + tw_time(t, double(tab.dim) / k));
          o.added += tw_time(t, double(tab.dim) / k);
        }
        if (fits || kind != EmbeddingSharding::Auto) options.push_back(std::move(o));
      }
    }
    TRAINSIM_CHECK(!options.empty(), "a sharding option for every table");
    const Option* best = &options.front();
    for (const Option& o : options) {
      const bool lower = o.max_load < best->max_load * (1 - 1e-9);
      const bool tie = !lower && o.max_load <= best->max_load * (1 + 1e-9);
      if (lower || (tie && o.added < best->added)) best = &o;
    }
    plan.kind_of_table[t] = best->kind;
    if (best->ranks.empty()) {
      const bool rw = best->kind == EmbeddingSharding::RowWise;
      plan.shards.push_back(TableShard{t, -1, double(tab.dim), rw ? 1.0 / ranks : 1.0});
      for (int r = 0; r < ranks; ++r) {
        load[r] += rw ? rw_time : dp_time;
        plan.rank_bytes[r] += rw ? full / ranks : full;
      }
    } else {
      for (int r : best->ranks) {
        const double cols = double(tab.dim) / best->shards;
        plan.shards.push_back(TableShard{t, r, cols, 1.0});
        load[r] += tw_time(t, cols);
        plan.rank_bytes[r] += full / best->shards;
      }
    }
  }
  return plan;
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
  double dp_table_bytes = 0;  // gradients of replicated tables, all-reduced with the dense ones
  double pooled_rw = 0;       // pooled bytes per sample of row-wise tables
  for (const TableShard& sh : sharding.shards) {
    if (sh.rank >= 0) continue;
    const EmbeddingTable& t = s.tables[sh.table];
    if (sharding.kind_of_table[sh.table] == EmbeddingSharding::DataParallel) {
      dp_table_bytes += double(t.rows) * t.dim * 4;
    } else {
      pooled_rw += traffic(s, t, t.dim).pooled_bytes;
    }
  }
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
      const TableTraffic tr = traffic(s, s.tables[sh.table], sh.columns);
      const bool dp = sharding.kind_of_table[sh.table] == EmbeddingSharding::DataParallel;
      const bool rw = sharding.kind_of_table[sh.table] == EmbeddingSharding::RowWise;
      const double samples = dp ? bsz : g;
      const double share = rw ? 1.0 / ranks : 1.0;
      // Row-wise: a rank gathers the rows it holds (1/ranks of the lookups) and writes partial sums for every sample.
      lookup += samples * (tr.lookup_bytes - tr.pooled_bytes) * share + samples * tr.pooled_bytes;
      update += samples * (tr.update_bytes - tr.pooled_bytes) * share + samples * tr.pooled_bytes;
    }
    ProgramBuilder pb("rank");
    const std::uint8_t compute = pb.add_stream("compute");
    const std::uint8_t a2a = pb.add_stream("embeddings");
    const std::uint8_t grad = pb.add_stream("dp");
    const std::uint32_t slot = pb.add_comm_slot("all");
    double flops = 0;
    auto run = [&](ComputeOp op, std::vector<TaskId> deps) {
      flops += op.flops;
      const std::uint32_t label = pb.add_label(op.name);
      return pb.compute(compute, pb.add_op(std::move(op)), label, -1, deps);
    };
    auto coll = [&](std::uint8_t stream, CollectiveKind kind, CommClass cls, double bytes, const std::string& name,
                    std::vector<TaskId> deps) {
      return pb.collective(stream, slot, kind, cls, static_cast<std::uint64_t>(std::llround(bytes)), pb.add_label(name),
                           -1, deps);
    };
    std::vector<TaskId> none;
    const TaskId emb = run(memory_op("embedding.lookup", lookup), none);
    std::vector<TaskId> pooled = {emb};
    if (ranks > 1 && a2a_bytes > 0)
      pooled.push_back(coll(a2a, CollectiveKind::AllToAll, CommClass::EP, a2a_bytes, "embeddings.a2a.fwd", {emb}));
    if (ranks > 1 && pooled_rw > 0)
      pooled.push_back(
          coll(a2a, CollectiveKind::ReduceScatter, CommClass::EP, g * pooled_rw, "embeddings.rw.fwd", {emb}));
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
    for (std::size_t i = bottom.size(); i-- > 0;) {
      last = run(memory_op("bottom." + std::to_string(i) + ".relu.bwd", bsz * bottom[i].second * wb * 3), {last});
      if (i > 0)
        last =
            run(gemm_op("bottom." + std::to_string(i) + ".dgrad", bsz, bottom[i].first, bottom[i].second, dt), {last});
      last = run(gemm_op("bottom." + std::to_string(i) + ".wgrad", bottom[i].first, bottom[i].second, bsz, dt), {last});
    }
    std::vector<TaskId> sync = {last};
    if (ranks > 1) {
      sync = {coll(grad, CollectiveKind::AllReduce, CommClass::DP, dense_params * 4 + dp_table_bytes, "dense.gradients",
                   {last})};
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
    m.buffers = 4 * a2a_bytes + g * pooled_rw;
    out.memory_of_program.push_back(m);
    flops_all += flops;
  }
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
