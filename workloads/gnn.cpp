#include "workloads/gnn.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "models/training_spec.hpp"
#include "sim/check.hpp"
#include "workloads/spmd_plan.hpp"

namespace trainsim {

const char* to_string(GnnModel m) {
  switch (m) {
    case GnnModel::Gcn:
      return "gcn";
    case GnnModel::GraphSage:
      return "graphsage";
    case GnnModel::Gat:
      return "gat";
  }
  return "?";
}

namespace {
// Edges as stored for message passing (both directions of an undirected edge).
const std::array<GraphStats, 3> kGraphPresets = {{
    // DGL RedditDataset documentation: 232,965 nodes, 114,615,892 edges, 602 features, 41 classes.
    {"reddit", 232965, 114615892, 602, 41},
    // OGB (Hu et al., NeurIPS 2020, Table 2): 2,449,029 nodes, 61,859,140 undirected edges, 100 features, 47 classes.
    {"ogbn-products", 2449029, 2 * 61859140LL, 100, 47},
    // OGB: 111,059,956 nodes, 1,615,685,872 directed citation edges (made undirected for training), 128 features, 172
    // classes.
    {"ogbn-papers100M", 111059956, 2 * 1615685872LL, 128, 172},
}};

struct LayerShape {
  int d_in = 0, d_out = 0;  // per node, all heads together
  int heads = 1;
  bool transform_first = false;  // dense update before the aggregation (aggregate the narrower features)
  int d_agg = 0;                 // features per node the aggregation (and the halo exchange) moves
};

LayerShape layer_shape(const GnnSpec& s, int l) {
  LayerShape ls;
  ls.d_in = l == 0 ? s.graph.features : s.hidden * (s.model == GnnModel::Gat ? s.heads : 1);
  const bool last = l == s.layers - 1;
  ls.heads = s.model == GnnModel::Gat && !last ? s.heads : 1;
  ls.d_out = last ? s.graph.classes : s.hidden * ls.heads;
  // GAT always projects first (attention is computed on projected features);
  // DGL's GraphConv and SAGEConv project first when that narrows the features
  // the aggregation moves (in_feats > out_feats).
  ls.transform_first = s.model == GnnModel::Gat || (!s.aggregate_first && ls.d_in > ls.d_out);
  ls.d_agg = ls.transform_first ? ls.d_out : ls.d_in;
  return ls;
}

double layer_params(const GnnSpec& s, const LayerShape& ls) {
  const double w = static_cast<double>(ls.d_in) * ls.d_out;
  switch (s.model) {
    case GnnModel::GraphSage:
      return 2 * w + ls.d_out;  // fc_self, fc_neigh, bias
    case GnnModel::Gat:
      return w + 3.0 * ls.d_out;  // projection, attention vectors a_l, a_r, bias
    case GnnModel::Gcn:
      break;
  }
  return w + ls.d_out;
}
}  // namespace

const GraphStats* find_graph_preset(const std::string& name) {
  for (const GraphStats& g : kGraphPresets) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

std::vector<std::string> graph_preset_names() {
  std::vector<std::string> out;
  for (const GraphStats& g : kGraphPresets) out.push_back(g.name);
  return out;
}

double random_partition_edge_cut(int partitions) { return 1.0 - 1.0 / partitions; }

double estimated_halo_nodes(const GnnSpec& s) {
  if (s.partitions <= 1) return 0;
  if (s.halo_nodes >= 0) return static_cast<double>(s.halo_nodes);
  const double nodes = static_cast<double>(s.graph.nodes);
  const double others = nodes - nodes / s.partitions;  // nodes of the other partitions
  const double cut_in = s.edge_cut * static_cast<double>(s.graph.edges) / s.partitions;
  // Expected distinct sources when cut_in edges pick theirs uniformly among `others`.
  return others * (1.0 - std::exp(-cut_in / others));
}

std::string GnnWorkload::name() const { return std::string(to_string(spec_.model)) + " on " + spec_.graph.name; }

WorkloadPlan GnnWorkload::plan(const Platform& /*platform*/, const Placement& placement,
                               const PlanOptions& /*options*/) const {
  const GnnSpec& s = spec_;
  const int parts = s.partitions;
  TRAINSIM_CHECK(parts == placement.ranks(), "one GNN partition per rank");
  const double n = static_cast<double>(s.graph.nodes) / parts;  // owned nodes
  const double e = static_cast<double>(s.graph.edges) / parts;  // edges into owned nodes
  const double h = estimated_halo_nodes(s);
  const double b = static_cast<double>(bytes_per_element(s.precision));
  const Dtype dt = s.precision;
  const double kIndexBytes = s.index_bytes;  // per edge and row of the CSR structure the aggregation walks

  ProgramBuilder pb("partition");
  const std::uint8_t compute = pb.add_stream("compute");
  const std::uint8_t halo = pb.add_stream("halo");
  const std::uint8_t grad = pb.add_stream("dp");
  const std::uint32_t slot = pb.add_comm_slot("partitions");
  double flops = 0;
  TaskId last = 0;
  bool have_last = false;
  std::vector<TaskId> exchanges;  // PipeGCN: exchanges nobody waits for inside the pass
  auto deps_of_last = [&]() { return have_last ? std::vector<TaskId>{last} : std::vector<TaskId>{}; };
  auto run = [&](ComputeOp op, std::vector<TaskId> deps) {
    flops += op.flops;
    // DGL and PyG issue every kernel from eager PyTorch (docs/frameworks.md, "Host dispatch").
    op.host_dispatch_seconds = host_dispatch_seconds(Framework::Eager);
    const std::uint32_t label = pb.add_label(op.name);
    last = pb.compute(compute, pb.add_op(std::move(op)), label, -1, deps);
    have_last = true;
    return last;
  };
  // The halo exchange before an aggregation: boundary features (or their gradients) of `d` per node.
  auto exchange = [&](const std::string& name, double d) {
    std::vector<TaskId> deps = deps_of_last();
    if (parts <= 1 || h <= 0) return deps;
    const auto bytes = static_cast<std::uint64_t>(std::llround(h * d * b));
    const TaskId t =
        pb.collective(halo, slot, CollectiveKind::AllToAll, CommClass::EP, bytes, pb.add_label(name), -1, deps);
    if (s.pipelined) {
      exchanges.push_back(t);
      return deps;  // stale features of the previous epoch: the aggregation does not wait
    }
    return std::vector<TaskId>{t};
  };
  auto spmm = [&](const std::string& name, const LayerShape& ls) {
    ComputeOp op = memory_op(name, e * (ls.d_agg * b + kIndexBytes) + n * (ls.d_agg * b + kIndexBytes), e * ls.d_agg);
    return op;
  };
  auto attention_edges = [&](const std::string& name, const LayerShape& ls) {
    // Per edge and head: gather the two attention halves, leaky ReLU, and the
    // edge softmax's exp, sum and divide (DGL's edge_softmax): eight element passes.
    return memory_op(name, e * ls.heads * b * 8 + e * kIndexBytes, e * ls.heads * 8);
  };

  double params = 0;
  MemoryBreakdown mem;
  std::vector<LayerShape> shapes;
  for (int l = 0; l < s.layers; ++l) shapes.push_back(layer_shape(s, l));
  // Forward.
  for (int l = 0; l < s.layers; ++l) {
    const LayerShape& ls = shapes[l];
    const std::string p = "layer " + std::to_string(l) + ".";
    params += layer_params(s, ls);
    const double src = n + h;  // nodes whose features the aggregation reads
    if (ls.transform_first) run(gemm_op(p + "project.fwd", src, ls.d_out, ls.d_in, dt), deps_of_last());
    if (s.model == GnnModel::Gat) run(attention_edges(p + "edge_softmax.fwd", ls), deps_of_last());
    run(spmm(p + "aggregate.fwd", ls), exchange(p + "halo.fwd", ls.d_agg));
    if (!ls.transform_first) run(gemm_op(p + "update.fwd", n, ls.d_out, ls.d_in, dt), deps_of_last());
    if (s.model == GnnModel::GraphSage) run(gemm_op(p + "self.fwd", n, ls.d_out, ls.d_in, dt), deps_of_last());
    const bool hidden_layer = l < s.layers - 1;
    // Bias, ReLU and dropout (read, write and a mask) on hidden layers; the loss's softmax on the last.
    run(memory_op(p + (hidden_layer ? "activation.fwd" : "loss.fwd"), n * ls.d_out * b * (hidden_layer ? 5 : 3)),
        deps_of_last());
    // Kept for backward: the aggregated and the updated features (and the mask), the attention weights.
    mem.activations += (n * (ls.d_agg + 3.0 * ls.d_out) + h * ls.d_agg) * b;
    if (s.model == GnnModel::Gat) mem.activations += e * ls.heads * b * 2;
  }
  // Backward.
  for (int l = s.layers - 1; l >= 0; --l) {
    const LayerShape& ls = shapes[l];
    const std::string p = "layer " + std::to_string(l) + ".";
    const bool hidden_layer = l < s.layers - 1;
    run(memory_op(p + (hidden_layer ? "activation.bwd" : "loss.bwd"), n * ls.d_out * b * (hidden_layer ? 5 : 3)),
        deps_of_last());
    if (s.model == GnnModel::GraphSage) {
      run(gemm_op(p + "self.wgrad", ls.d_in, ls.d_out, n, dt), deps_of_last());
      if (l > 0) run(gemm_op(p + "self.dgrad", n, ls.d_in, ls.d_out, dt), deps_of_last());
    }
    if (!ls.transform_first) {
      run(gemm_op(p + "update.wgrad", ls.d_in, ls.d_out, n, dt), deps_of_last());
      if (l > 0) run(gemm_op(p + "update.dgrad", n, ls.d_in, ls.d_out, dt), deps_of_last());
    }
    // The aggregation's backward is needed when something below it trains:
    // a projection before it, or earlier layers.
    if (ls.transform_first || l > 0) {
      run(spmm(p + "aggregate.bwd", ls), deps_of_last());
      // Gradients of the boundary features go back to their owners.
      const std::vector<TaskId> after = exchange(p + "halo.bwd", ls.d_agg);
      if (s.model == GnnModel::Gat) run(attention_edges(p + "edge_softmax.bwd", ls), after);
      if (ls.transform_first) {
        const double src = n + h;
        run(gemm_op(p + "project.wgrad", ls.d_in, ls.d_out, src, dt), after);
        if (l > 0) run(gemm_op(p + "project.dgrad", src, ls.d_in, ls.d_out, dt), deps_of_last());
      } else if (s.model != GnnModel::Gat) {
        // Gradients arriving for the halo add into the owned nodes' (a vector add).
        if (parts > 1) run(memory_op(p + "halo_grad.add", h * ls.d_agg * b * 3), after);
      }
    }
  }
  // Gradient all-reduce (fp32, as DDP) and the Adam step.
  std::vector<TaskId> sync = deps_of_last();
  sync.insert(sync.end(), exchanges.begin(), exchanges.end());
  if (parts > 1) {
    const auto bytes = static_cast<std::uint64_t>(std::llround(params * 4));
    sync = {pb.collective(grad, slot, CollectiveKind::AllReduce, CommClass::DP, bytes, pb.add_label("gradients"), -1,
                          sync)};
  }
  // Adam: read parameter, gradient and two moments, write parameter and moments (fp32).
  run(memory_op("optimizer", params * 4 * 7), sync);

  SpmdRanks ranks;
  ranks.rank_label = "partition";
  ranks.programs.push_back(std::move(pb).finish());
  ranks.program_of_rank.assign(parts, 0);
  // Graph structure (CSR and its transpose for backward), input features of owned and halo nodes.
  mem.buffers = 2 * (e + n) * kIndexBytes + (n + h) * s.graph.features * b;
  mem.weights = params * 4;
  mem.gradients = params * 4;
  mem.optimizer = params * 8;
  ranks.memory_of_program.push_back(mem);

  WorkloadPlan plan;
  plan_spmd(std::move(ranks), placement, plan);
  plan.model_flops = plan.hardware_flops = flops * parts;
  plan.flop_convention =
      "GNN: 2mnk per GEMM of the dense updates plus one per edge and feature of each aggregation and eight per edge "
      "and head of GAT attention, forward and backward as executed (docs/workloads.md)";
  plan.throughput_unit = "epochs";
  plan.units_per_iteration = 1;
  plan.samples_per_iteration = static_cast<double>(s.graph.nodes);
  plan.checkpoint_bytes = params * 12;
  plan.peak_dtype = dt;
  return plan;
}

}  // namespace trainsim
