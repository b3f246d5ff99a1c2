#include "tools/frontend/diloco_job.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>

#include "calibration/collective_cost.hpp"
#include "tools/frontend/diloco_input.hpp"

namespace trainsim {

namespace {
constexpr double kGiB = 1073741824.0;

// Parameters held by each pipeline stage (all of its TP ranks together), as
// the groups PRIME's per-layer outer all-reduce issues one after another: the
// embedding on the first stage, each layer, the LM head on the last (a tied
// head is a second copy there when the stages differ, as in Megatron-LM).
std::vector<std::vector<double>> stage_param_groups(const TransformerSpec& model, const ParallelSpec& par) {
  std::vector<std::vector<double>> out(static_cast<std::size_t>(par.pp));
  out.front().push_back(model.embedding_params());
  const int chunks = par.virtual_stages();
  for (int v = 0; v < chunks; ++v) {
    const int stage = par.custom_schedule.chunk_stage.empty() ? v % par.pp : par.custom_schedule.chunk_stage[v];
    const int first = par.first_layer_of_virtual_stage(v, model.layers);
    for (int l = first; l < first + par.layers_of_virtual_stage(v, model.layers); ++l) {
      out[stage].push_back(model.params_of_kind(model.layer_kind(l)));
    }
  }
  if (!model.tied_embeddings || par.pp > 1) out.back().push_back(static_cast<double>(model.vocab) * model.hidden);
  return out;
}

// Time until every transfer completes, all started together at time 0 on `network`.
double concurrent_allreduce_seconds(NetworkModel& network, const std::vector<Communicator>& comms,
                                    const std::vector<std::uint64_t>& bytes) {
  network.bind(comms);
  Time last = Time();
  std::size_t pending = 0;
  for (std::size_t c = 0; c < comms.size(); ++c) {
    TransferRequest t;
    t.comm = static_cast<std::uint32_t>(c);
    t.kind = CollectiveKind::AllReduce;
    t.bytes = bytes[c];
    const Time done = network.start(Time(), t, c);
    if (done == Time::max()) {
      ++pending;
    } else {
      last = std::max(last, done);
    }
  }
  std::vector<TransferDone> finished;
  while (pending > 0 && network.next_event() != Time::max()) {
    const Time at = network.next_event();
    finished.clear();
    network.advance(at, finished);
    for (const TransferDone& d : finished) last = std::max(last, d.time);
    pending -= std::min(pending, finished.size());
  }
  return last.to_seconds();
}
}  // namespace

JobRun run_diloco_job(const Scenario& s, Fidelity fidelity) {
  const auto t0 = std::chrono::steady_clock::now();
  const DilocoSpec& spec = *s.diloco;
  const int sites = s.cluster.datacenters.count;

  // One site's inner step.
  Scenario site = s;
  site.diloco.reset();
  site.cluster = site_cluster(s.cluster);
  site.parallel = site_parallel(s.parallel, sites);
  JobRun run = run_job(site, fidelity);
  JobReport& rep = run.report;
  rep.scenario = s.name;
  rep.gpus = s.cluster.total_gpus();
  if (!rep.feasible || rep.iteration_time_s <= 0) return run;

  // The outer all-reduce: one communicator per (pp, tp) coordinate over every
  // replica of every site, all at once on the whole cluster's network.
  Platform platform(s.cluster, s.profiles);
  const Placement placement = Placement::of(s.parallel);
  const std::vector<std::vector<double>> groups = stage_param_groups(s.model, s.parallel);
  std::vector<double> params;
  for (const std::vector<double>& g : groups) params.push_back(std::accumulate(g.begin(), g.end(), 0.0));
  std::vector<Communicator> comms;
  std::vector<int> comm_stage;
  for (int pp = 0; pp < s.parallel.pp; ++pp) {
    for (int tp = 0; tp < s.parallel.tp; ++tp) {
      Communicator c;
      c.name = "diloco.outer group stage " + std::to_string(pp) + ", tp " + std::to_string(tp);
      for (int dp = 0; dp < s.parallel.dp; ++dp) c.members.push_back(placement.gpu(RankCoord{tp, 0, 0, dp, pp}));
      c.simulated_members = static_cast<int>(c.members.size());
      comms.push_back(std::move(c));
      comm_stage.push_back(pp);
    }
  }
  // Fused: each stage's parameters in one all-reduce. Per layer: round r
  // all-reduces the r-th group of every stage together, rounds one after
  // another (a stage's next group waits for its previous one); a round of
  // the same sizes as an earlier one costs the same.
  std::vector<std::vector<double>> rounds;  // [round][stage] parameters, 0 where the stage has no such group
  if (spec.outer_allreduce_per_layer) {
    std::size_t most = 0;
    for (const std::vector<double>& g : groups) most = std::max(most, g.size());
    rounds.assign(most, std::vector<double>(groups.size(), 0.0));
    for (std::size_t st = 0; st < groups.size(); ++st) {
      for (std::size_t r = 0; r < groups[st].size(); ++r) rounds[r][st] = groups[st][r];
    }
  } else {
    rounds.push_back(params);
  }
  // A fused fragment is 1/F of each stage; per layer, a fragment is 1/F of the layer groups.
  const double fused_fragments = spec.outer_allreduce_per_layer ? 1 : spec.fragments;
  std::unique_ptr<NetworkModel> network;
  std::map<std::vector<std::uint64_t>, double> round_seconds;
  double sync_s = 0;
  for (const std::vector<double>& round : rounds) {
    std::vector<Communicator> round_comms;
    std::vector<std::uint64_t> bytes;
    for (std::size_t c = 0; c < comms.size(); ++c) {
      const double p = round[static_cast<std::size_t>(comm_stage[c])];
      if (p <= 0) continue;
      round_comms.push_back(comms[c]);
      bytes.push_back(task_bytes(p / s.parallel.tp * spec.outer_bytes / fused_fragments));
    }
    auto [it, fresh] = round_seconds.try_emplace(bytes, 0.0);
    if (fresh) {
      network = platform.network_model(fidelity);  // each round from an idle network at time 0
      it->second = concurrent_allreduce_seconds(*network, round_comms, bytes);
    }
    sync_s += it->second;
  }
  DilocoReport d;
  d.sites = sites;
  d.spec = spec;
  d.inner_step_s = rep.iteration_time_s;
  d.fragment_sync_s = spec.outer_allreduce_per_layer ? sync_s / spec.fragments : sync_s;

  // The outer optimiser on each GPU's shard (the site's replicas share the work,
  // as after the reduce-scatter of the hierarchical all-reduce); the busiest stage sets the pace.
  const int site_dp = s.parallel.dp / sites;
  const Cluster& cluster = platform.cluster();
  double outer_compute = 0;
  double shard_max = 0;
  for (int pp = 0; pp < s.parallel.pp; ++pp) {
    const double shard = params[pp] / s.parallel.tp / site_dp;
    ComputeOp op;
    op.name = "diloco.outer_step";
    op.kind = OpKind::MemoryBound;
    op.dtype = Dtype::FP32;
    op.bytes = shard * diloco_outer_step_bytes_per_param(spec) / spec.fragments;
    // Per element: pseudo-gradient (1 subtraction), momentum m = mu m + g (2),
    // Nesterov step p -= lr (g + mu m) (4): 7 FLOPs; memory-bound either way.
    op.flops = shard * 7 / spec.fragments;
    const int type = cluster.gpu_type_of(placement.gpu(RankCoord{0, 0, 0, 0, pp}));
    outer_compute = std::max(outer_compute, platform.costs().duration(op, type).to_seconds());
    shard_max = std::max(shard_max, shard);
  }
  d.timing = diloco_timing(spec, d.inner_step_s, d.fragment_sync_s, outer_compute);

  double total_params = 0;
  for (double p : params) total_params += p;
  const double tokens_per_step = static_cast<double>(s.parallel.global_batch) * s.training.seq_len;
  d.wan_bytes_per_outer_step = wan_allreduce_bytes(total_params, sites, spec.outer_bytes);
  d.wan_bytes_per_token = d.wan_bytes_per_outer_step / (tokens_per_step * spec.inner_steps);
  d.dp_wan_bytes_per_token = wan_allreduce_bytes(total_params, sites, s.training.grad_reduce_bytes) / tokens_per_step;

  // Outer parameters and momentum (fp32) of the GPU's shard.
  const double outer_state = spec.outer_state_on_gpu ? shard_max * 8 : 0;
  d.outer_state_gib = outer_state / kGiB;
  for (StageReport& st : rep.per_stage) {
    st.memory.optimizer += outer_state;
    rep.peak_memory_gib = std::max(rep.peak_memory_gib, st.memory.total() / kGiB);
    if (st.memory.total() > st.memory_capacity) {
      rep.feasible = false;
      rep.problems.push_back("out of memory on stage " + std::to_string(st.stage) + " with the DiLoCo outer state (" +
                             std::to_string(outer_state / kGiB) +
                             " GiB per GPU; \"outer_state\": \"host\" keeps it "
                             "in host memory)");
    }
  }

  // Headline figures per inner step, the outer step spread over its H steps.
  const double per_step = d.timing.outer_step_s / spec.inner_steps;
  const double k = rep.iteration_time_s / per_step;  // < 1: the outer step's share slows the job
  rep.gpus = cluster.num_gpus();
  rep.iteration_time_s = per_step;
  rep.tokens_per_s *= sites * k;
  rep.units_per_s *= sites * k;
  rep.samples_per_s *= sites * k;
  rep.tflops_per_gpu *= k;
  rep.mfu *= k;
  rep.hfu *= k;
  rep.breakdown.exposed_comm_s[static_cast<int>(CommClass::DP)] += d.timing.exposed_sync_s / spec.inner_steps;
  rep.breakdown.compute_s += d.timing.outer_compute_s / spec.inner_steps;
  for (const std::string& w : network->warnings()) {
    if (std::find(rep.warnings.begin(), rep.warnings.end(), w) == rep.warnings.end()) rep.warnings.push_back(w);
  }
  if (!spec.outer_state_on_gpu) {
    rep.warnings.push_back(
        "diloco outer_state \"host\": the outer step is costed at the GPU's memory bandwidth; "
        "its copies over PCIe and the host's memory bandwidth are not modelled");
  }
  rep.wan = wan_crossings(cluster, comms);  // only the outer all-reduces cross it
  // What the WAN carries per inner step: each edge of the outer all-reduces'
  // ring over the sites (sites in order, dp outermost) ring factor x the
  // pseudo-gradients, once per H steps. No link occupancy: busy_fraction -1.
  std::map<std::pair<int, int>, double> pair_bytes;
  for (int i = 0; i < sites; ++i) {
    const int a = i, b = (i + 1) % sites;
    pair_bytes[{std::min(a, b), std::max(a, b)}] +=
        ring_factor(CollectiveKind::AllReduce, sites) * total_params * spec.outer_bytes / spec.inner_steps;
  }
  for (const auto& [pair, bytes] : pair_bytes) {
    WanLinkLoad w;
    w.site_a = pair.first;
    w.site_b = pair.second;
    w.links = s.cluster.datacenters.wan_links;
    w.bytes = bytes;
    w.utilization = bytes / (2.0 * w.links * s.cluster.datacenters.wan_bandwidth * per_step);
    w.kinds = {"diloco.outer"};
    rep.wan_links.push_back(std::move(w));
  }
  rep.diloco = d;
  rep.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

}  // namespace trainsim
