#include "models/mpmd.hpp"

#include <algorithm>
#include <string>

namespace trainsim {

int stage_tp(const ParallelSpec& par, int s) {
  return par.stages.empty() ? par.tp : par.stages[static_cast<std::size_t>(s)].tp;
}

int stage_dp(const ParallelSpec& par, int s) {
  const int dp = par.stages.empty() ? -1 : par.stages[static_cast<std::size_t>(s)].dp;
  return dp > 0 ? dp : par.dp;
}

int stage_cp(const ParallelSpec& par, int s) {
  const int cp = par.stages.empty() ? -1 : par.stages[static_cast<std::size_t>(s)].cp;
  return cp > 0 ? cp : par.cp;
}

int stage_micro_batch(const ParallelSpec& par, int s) {
  const int mb = par.stages.empty() ? -1 : par.stages[static_cast<std::size_t>(s)].micro_batch;
  return mb > 0 ? mb : par.micro_batch;
}

std::vector<int> stage_first_gpus(const ParallelSpec& par, const ClusterSpec& cluster) {
  std::vector<long> group_first, group_end;
  long total = 0;
  for (const auto& g : cluster.groups) {
    group_first.push_back(total);
    total += static_cast<long>(g.count) * g.node.gpus_per_node;
    group_end.push_back(total);
  }
  std::vector<long> next = group_first;
  long next_any = 0;
  std::vector<int> out;
  for (int s = 0; s < par.pp; ++s) {
    const long ranks = static_cast<long>(stage_tp(par, s)) * stage_cp(par, s) * stage_dp(par, s);
    const int g = par.stages.empty() ? -1 : par.stages[static_cast<std::size_t>(s)].group;
    long& cursor = g >= 0 ? next[static_cast<std::size_t>(g)] : next_any;
    const long end = g >= 0 ? group_end[static_cast<std::size_t>(g)] : total;
    if (cursor + ranks > end) return {};
    out.push_back(static_cast<int>(cursor));
    cursor += ranks;
  }
  return out;
}

StageProgramSpec stage_program_spec(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                                    int s) {
  StageProgramSpec out;
  const int encoder_layers = model.encoder.empty() ? 0 : model.encoder.front().layers;
  int first_layer = 0;
  for (int i = 0; i < s; ++i) first_layer += par.stages[static_cast<std::size_t>(i)].layers;
  out.encoder = first_layer < encoder_layers;
  out.model = out.encoder ? model.encoder.front() : model;
  out.model.encoder.clear();
  out.par = par;
  out.par.stages.clear();
  out.par.tp = stage_tp(par, s);
  out.par.dp = stage_dp(par, s);
  out.par.cp = stage_cp(par, s);
  out.par.micro_batch = stage_micro_batch(par, s);
  const int rc = par.stages[static_cast<std::size_t>(s)].recompute;
  if (rc >= 0) out.par.recompute = static_cast<Recompute>(rc);
  out.train = train;
  if (out.encoder) out.train.seq_len = model.encoder_tokens;
  // Layer counts of this sub-model's stages; the other sub-model's stages hold none of its layers.
  out.par.stage_layers.assign(static_cast<std::size_t>(par.pp), 0);
  out.first_stage = -1;
  int layer = 0;
  for (int i = 0; i < par.pp; ++i) {
    const bool in_encoder = layer < encoder_layers;
    layer += par.stages[static_cast<std::size_t>(i)].layers;
    if (in_encoder != out.encoder) continue;
    out.par.stage_layers[static_cast<std::size_t>(i)] = par.stages[static_cast<std::size_t>(i)].layers;
    if (out.first_stage < 0) out.first_stage = i;
  }
  return out;
}

double boundary_sample_bytes(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train, int s) {
  const StageProgramSpec from = stage_program_spec(model, par, train, s);
  // An encoder's outputs enter the main model projected to its hidden size (LLaVA's projector).
  const StageProgramSpec to = stage_program_spec(model, par, train, s + 1);
  const int hidden = from.encoder && !to.encoder ? model.hidden : from.model.hidden;
  return static_cast<double>(from.train.seq_len) * hidden * activation_element_bytes(train);
}

BoundaryShape boundary_shape(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train, int from,
                             int to) {
  const int a = stage_dp(par, from), b = stage_dp(par, to);
  const int x = stage_tp(par, from), y = stage_tp(par, to);
  // CP: under the ring's causal load-balancing split (rank i holds chunks i and
  // 2u-1-i of 2u), CP rank i of size u holds exactly the pieces of ranks
  // i*v/u .. (i+1)*v/u - 1 of size v > u: a fan like the replicas'.
  const int u = stage_cp(par, from), v = stage_cp(par, to);
  const bool split = par.pp_scatter_gather || par.sequence_parallel;
  BoundaryShape out;
  out.sends = (b >= a ? b / a : 1) * (v >= u ? v / u : 1) * (y >= x ? y / x : 1);
  out.recvs = (a >= b ? a / b : 1) * (u >= v ? u / v : 1) * (x >= y ? x / y : 1);
  out.samples = std::min(stage_micro_batch(par, from), stage_micro_batch(par, to));
  out.bytes = out.samples * boundary_sample_bytes(model, par, train, std::min(from, to)) / std::max(u, v) /
              (split ? std::max(x, y) : 1);
  return out;
}

std::vector<LayoutProblem> check_stage_layouts(const TransformerSpec& m, const ParallelSpec& p, const TrainingSpec& t,
                                               const ClusterSpec& cluster) {
  std::vector<LayoutProblem> out;
  auto problem = [&](std::string path, std::string message) { out.push_back({std::move(path), std::move(message)}); };
  const auto str = [](long v) { return std::to_string(v); };
  if (p.stages.empty()) {
    if (!m.encoder.empty())
      problem("/model/encoder", "a model with an encoder needs per-stage layouts (parallel.stages)");
    return out;
  }
  if (static_cast<int>(p.stages.size()) != p.pp) {
    problem("/parallel/stages", "expected one entry per pipeline stage (pp = " + str(p.pp) + "), found " +
                                    str(static_cast<long>(p.stages.size())));
    return out;
  }
  if (p.vpp > 1 || p.schedule == ScheduleKind::Interleaved1F1B || p.schedule == ScheduleKind::ZeroBubble1p ||
      p.schedule == ScheduleKind::ZeroBubble2p)
    problem("/parallel/schedule",
            "per-stage layouts run one model chunk per stage with a fixed schedule: use gpipe, 1f1b, zb-h1, zb-h2, "
            "deepspeed-1f1b(-legacy) or "
            "a custom schedule with one chunk per stage");
  // A custom schedule gives each stage its own order of units (the per-stage
  // program of JaxPP and HAP); its chunks must be the stages' layer blocks, in order.
  if (p.schedule == ScheduleKind::Custom) {
    const std::vector<int>& cs = p.custom_schedule.chunk_stage;
    bool in_order = static_cast<int>(cs.size()) == p.pp;
    for (int v = 0; in_order && v < p.pp; ++v) in_order = cs[static_cast<std::size_t>(v)] == v;
    if (!in_order)
      problem(
          "/parallel/schedule/chunk_stages",
          "with per-stage layouts each stage holds one model chunk, its layers: expected chunk_stages [0, 1, ..., " +
              str(p.pp - 1) + "] (one chunk per stage, in stage order)");
  }
  if (!p.stage_layers.empty())
    problem("/parallel/stage_layers", "give the layers in parallel.stages, not stage_layers");
  if (!p.placement_gpus.empty() || p.placement_order != "tp-cp-ep-dp-pp")
    problem("/parallel/placement", "per-stage layouts place each stage on its group; remove placement");
  if (m.moe.enabled() || p.ep > 1)
    problem("/parallel/stages", "per-stage layouts of mixture-of-experts models are not modelled yet");
  const int encoder_layers = m.encoder.empty() ? 0 : m.encoder.front().layers;
  if (!m.encoder.empty() && m.encoder_tokens < 1)
    problem("/model/encoder/tokens", "expected the encoder's output tokens per sample (>= 1)");
  long layer = 0;
  for (int s = 0; s < p.pp; ++s) {
    const StageLayout& st = p.stages[static_cast<std::size_t>(s)];
    const std::string at = "/parallel/stages/" + std::to_string(s);
    if (st.group >= static_cast<int>(cluster.groups.size()))
      problem(at + "/group", "expected a node group index below " + str(static_cast<long>(cluster.groups.size())) +
                                 ", found " + str(st.group));
    const bool in_encoder = layer < encoder_layers;
    const TransformerSpec& sub = in_encoder ? m.encoder.front() : m;
    if (in_encoder && layer + st.layers > encoder_layers)
      problem(at + "/layers", "the stage would hold layers of both the encoder (its last " +
                                  str(encoder_layers - layer) + ") and the model; a stage runs one sub-model");
    layer += st.layers;
    if (sub.heads % st.tp != 0 || sub.ffn_hidden % st.tp != 0)
      problem(at + "/tp", "expected a divisor of the " + std::string(in_encoder ? "encoder's " : "model's ") +
                              str(sub.heads) + " heads and FFN size " + str(sub.ffn_hidden) + ", found " + str(st.tp));
    else if (sub.kv_heads > 0 && sub.kv_heads % st.tp != 0 && st.tp % sub.kv_heads != 0)
      problem(at + "/tp",
              "expected tp to divide or be a multiple of the " + str(sub.kv_heads) + " KV heads, found " + str(st.tp));
    const int dp = stage_dp(p, s), mb = stage_micro_batch(p, s);
    if (static_cast<long>(dp) * mb != static_cast<long>(p.dp) * p.micro_batch)
      problem(at + (st.dp > 0 ? "/dp" : "/micro_batch"),
              "every stage runs the same samples per pipeline step, parallel.dp*micro_batch = " +
                  str(static_cast<long>(p.dp) * p.micro_batch) + "; stage " + str(s) +
                  " runs dp*micro_batch = " + str(dp) + "*" + str(mb) + " = " + str(static_cast<long>(dp) * mb));
    if (s > 0) {
      const int prev = stage_dp(p, s - 1);
      if (std::max(prev, dp) % std::min(prev, dp) != 0)
        problem(at + "/dp",
                "a replica sends its samples to the replicas that own them, which needs data-parallel "
                "sizes that divide one another; " +
                    str(prev) + " (stage " + str(s - 1) + ") and " + str(dp) + " do not");
    }
    const int cp = stage_cp(p, s);
    const long tokens = in_encoder ? m.encoder_tokens : t.seq_len;
    if (st.cp > 0 && (tokens % cp != 0))
      problem(at + "/cp", "expected a divisor of the " + std::string(in_encoder ? "encoder's " : "model's ") +
                              str(tokens) + " tokens per sample, found " + str(cp));
    if (s > 0 && std::max(stage_cp(p, s - 1), cp) % std::min(stage_cp(p, s - 1), cp) != 0)
      problem(at + "/cp",
              "a CP rank sends its tokens to the CP ranks that own them, which needs CP sizes that divide "
              "one another; " +
                  str(stage_cp(p, s - 1)) + " (stage " + str(s - 1) + ") and " + str(cp) + " do not");
    if (s > 0) {
      const int a = p.stages[static_cast<std::size_t>(s) - 1].tp;
      if (std::max(a, st.tp) % std::min(a, st.tp) != 0)
        problem(at + "/tp", "activations are resharded between TP groups whose sizes divide one another; " + str(a) +
                                " (stage " + str(s - 1) + ") and " + str(st.tp) + " do not");
      else if (a != st.tp && !p.pp_scatter_gather && !p.sequence_parallel)
        problem(at + "/tp",
                "resharding between stages of different TP sizes sends 1/tp of an activation per rank: it "
                "needs pp_scatter_gather or sequence_parallel");
    }
  }
  if (layer != encoder_layers + m.layers)
    problem(
        "/parallel/stages",
        "the stages hold " + str(layer) + " layers; expected the " +
            (encoder_layers > 0 ? "encoder's " + str(encoder_layers) + " and the model's " : std::string("model's ")) +
            str(m.layers) + (encoder_layers > 0 ? " (" + str(encoder_layers + m.layers) + ")" : ""));
  long gpus = 0, cluster_gpus = 0;
  for (int s = 0; s < p.pp; ++s)
    gpus += static_cast<long>(p.stages[static_cast<std::size_t>(s)].tp) * stage_cp(p, s) * stage_dp(p, s);
  for (const auto& g : cluster.groups) cluster_gpus += static_cast<long>(g.count) * g.node.gpus_per_node;
  if (gpus != cluster_gpus)
    problem("/parallel/stages",
            "the stages use " + str(gpus) + " GPUs (sum of tp*cp*dp), expected the cluster's " + str(cluster_gpus));
  else if (out.empty() && stage_first_gpus(p, cluster).empty())
    problem("/parallel/stages", "the stages given a node group need more GPUs than that group has");
  return out;
}

}  // namespace trainsim
