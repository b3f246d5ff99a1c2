#include "tools/frontend/job.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "models/pipedream.hpp"
#include "models/planner.hpp"
#include "sim/check.hpp"
#include "sim/executor.hpp"
#include "sim/link_images.hpp"
#include "sim/platform.hpp"
#include "tools/frontend/outer_loop.hpp"

namespace trainsim {

namespace {
constexpr double kGiB = 1073741824.0;

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}
}  // namespace

namespace {
// Failures over the job's life, for the job the simulation found.
ReliabilityReport job_life(const ReliabilitySpec& spec, const JobReport& rep, const WorkloadPlan& plan,
                           const Cluster& cluster, const std::string& file) {
  JobShape job;
  job.gpus = rep.gpus;
  job.nodes = cluster.num_nodes();
  job.iteration_s = rep.iteration_time_s;
  job.units_per_s = rep.units_per_s;
  job.checkpoint_bytes = plan.checkpoint_bytes;
  double nic = 0;
  for (int n = 0; n < cluster.num_nodes(); ++n) {
    const double bw = cluster.node_spec(n).nic_bandwidth_per_gpu();
    nic = n == 0 ? bw : std::min(nic, bw);
  }
  job.peer_bandwidth_gpu = nic;
  const double segments = reliability_segments(spec, job) * spec.trials;
  if (!(segments <= kMaxReliabilitySegments)) {
    throw InputError(
        {Diagnostic{file, "/reliability/trials",
                    "the failure model would walk through " + fmt("%.3g", segments) +
                        " checkpoints and interruptions (trials x segments), above the limit of " +
                        fmt("%.3g", kMaxReliabilitySegments) + "; use fewer trials or a longer checkpoint interval"}});
  }
  return analyse_reliability(spec, job);
}

// Degraded links: events that change their capacity in the flow network at
// the given times; at analytical fidelity (no time, no routes) a lower
// capacity for the whole iteration of every communicator that uses the link.
// `network` is null when called for the analytical model, before planning.
void apply_link_perturbations(const Scenario& s, Fidelity fidelity, Platform& platform, NetworkModel* network) {
  if (s.link_perturbations.empty()) return;
  const bool analytical = fidelity != Fidelity::Flow;
  if (analytical != (network == nullptr)) return;
  const Topology& topo = platform.topology();
  // Under adaptive routing a leaf's up-links are one bundle (docs/network.md):
  // a degraded up-link takes its share of the bundle's capacity away, and
  // the shares lost by several entries add up while their windows overlap.
  struct BundleLoss {
    std::uint32_t link;
    double start_s, end_s, lost;  // end_s -1: to the end
  };
  std::vector<BundleLoss> bundle_losses;
  for (const LinkPerturbation& lp : s.link_perturbations) {
    if (analytical && (lp.start_s > 0 || lp.end_s >= 0)) {
      throw InputError({Diagnostic{s.file, lp.pointer,
                                   "a link degraded within a window of the iteration needs --fidelity flow: the "
                                   "analytical model has no time within a transfer (docs/faults.md)"}});
    }
    const int dc_from = topo.bundled_spine_datacenter(lp.from), dc_to = topo.bundled_spine_datacenter(lp.to);
    const int bundle_dc = dc_from >= 0 ? dc_from : dc_to;
    const std::string& other = dc_from >= 0 ? lp.to : lp.from;
    bool found = false;
    for (std::uint32_t l = 0; l < topo.num_links(); ++l) {
      const TopologyLink& link = topo.link(l);
      if (bundle_dc >= 0) {
        // The bundle between the named leaf and its datacenter's spines.
        const TopologyVertex& a = topo.vertex(link.from);
        const TopologyVertex& b = topo.vertex(link.to);
        const bool spine_end = (a.kind == VertexKind::Spine && a.datacenter == bundle_dc) ||
                               (b.kind == VertexKind::Spine && b.datacenter == bundle_dc);
        if (link.kind != LinkKind::Uplink || !spine_end ||
            topo.vertex_name(a.kind == VertexKind::Spine ? link.to : link.from) != other) {
          continue;
        }
        found = true;
        const double lost = (1.0 - lp.capacity_factor) / topo.fabric().spines;
        if (analytical) {
          // Once per entry (the analytical model's losses of a bundle add up).
          if (a.kind != VertexKind::Spine) platform.degrade_analytical_link(l, 1.0 - lost);
        } else {
          bundle_losses.push_back(BundleLoss{l, lp.start_s, lp.end_s, lost * link.capacity});
        }
        continue;
      }
      const std::string a = topo.vertex_name(link.from), b = topo.vertex_name(link.to);
      if (!((a == lp.from && b == lp.to) || (a == lp.to && b == lp.from))) continue;
      found = true;
      if (analytical) {
        platform.degrade_analytical_link(l, lp.capacity_factor);
        continue;
      }
      network->set_link_capacity(Time::seconds(lp.start_s), l, link.capacity * lp.capacity_factor);
      if (lp.end_s >= 0) network->set_link_capacity(Time::seconds(lp.end_s), l, link.capacity);
    }
    if (!found) {
      throw InputError({Diagnostic{s.file, lp.pointer,
                                   "no link joins \"" + lp.from + "\" and \"" + lp.to +
                                       "\" in the cluster's topology (vertices are named like \"" +
                                       topo.vertex_name(topo.link(topo.num_links() - 1).from) + "\" or \"" +
                                       topo.vertex_name(topo.link(0).to) + "\", docs/network.md)"}});
    }
  }
  // A bundle's capacity at every instant one of its losses starts or ends.
  std::sort(bundle_losses.begin(), bundle_losses.end(),
            [](const BundleLoss& x, const BundleLoss& y) { return x.link < y.link; });
  for (std::size_t i = 0; i < bundle_losses.size();) {
    std::size_t j = i;
    while (j < bundle_losses.size() && bundle_losses[j].link == bundle_losses[i].link) ++j;
    std::vector<double> instants;
    for (std::size_t k = i; k < j; ++k) {
      instants.push_back(bundle_losses[k].start_s);
      if (bundle_losses[k].end_s >= 0) instants.push_back(bundle_losses[k].end_s);
    }
    std::sort(instants.begin(), instants.end());
    instants.erase(std::unique(instants.begin(), instants.end()), instants.end());
    const std::uint32_t l = bundle_losses[i].link;
    for (double t : instants) {
      double cap = topo.link(l).capacity;
      for (std::size_t k = i; k < j; ++k) {
        const BundleLoss& b = bundle_losses[k];
        if (b.start_s <= t && (b.end_s < 0 || t < b.end_s)) cap -= b.lost;
      }
      network->set_link_capacity(Time::seconds(t), l, std::max(cap, 0.0));
    }
    i = j;
  }
}

// Each stage's memory against its GPU's usable capacity, from the plan alone:
// a job that cannot fit is known before any simulation (docs/limits.md).
void check_stage_memory(const WorkloadPlan& plan, const Platform& platform, JobReport& rep) {
  const Cluster& cluster = platform.cluster();
  for (int st = 0; st < static_cast<int>(plan.stages.size()); ++st) {
    StageReport sr;
    sr.stage = st;
    sr.layers = plan.stages[st].layers;
    sr.memory = plan.stages[st].memory;
    const int rank = plan.recorded_rank_of_stage[st];
    const int type = cluster.gpu_type_of(plan.setup.ranks[rank].gpu);
    sr.memory_capacity = cluster.gpu_type(type).memory_bytes - platform.profile(type).memory_reserved.value;
    for (int t : plan.stages[st].gpu_types) sr.gpus.push_back(cluster.gpu_type(t).name);
    rep.peak_memory_gib = std::max(rep.peak_memory_gib, sr.memory.total() / kGiB);
    if (sr.memory.total() > sr.memory_capacity) {
      rep.feasible = false;
      const MemoryBreakdown& m = sr.memory;
      rep.problems.push_back(
          "out of memory on " + plan.setup.ranks[rank].name + " (" + cluster.gpu_type(type).name + "): needs " +
          fmt("%.1f", m.total() / kGiB) + " GiB of " + fmt("%.1f", sr.memory_capacity / kGiB) +
          " GiB usable (weights " + fmt("%.1f", m.weights / kGiB) + ", gradients " + fmt("%.1f", m.gradients / kGiB) +
          ", optimizer " + fmt("%.1f", m.optimizer / kGiB) + ", activations " + fmt("%.1f", m.activations / kGiB) +
          ", buffers " + fmt("%.1f", m.buffers / kGiB) + " GiB)");
    }
    rep.per_stage.push_back(std::move(sr));
  }
}

// PipeDream's steady state (no flush, models/pipedream.hpp): each rank runs
// its units back to back, iteration after iteration, so the period is the
// busiest rank's own work in one simulated iteration: its compute and the
// transfers that hold it (the fill, the drain and the waits for its pipeline
// neighbours are gone). The gradient reduction of a batch overlaps the next
// batch's passes (PipeDream-2BW applies it one step late) but must itself fit
// in the period.
double steady_pipeline_period(const SimulationResult& res) {
  double period = 0;
  constexpr auto dp_category = static_cast<std::uint8_t>(1 + static_cast<int>(CommClass::DP));
  for (const RankTimeline& tl : res.timelines) {
    const TimeBreakdown b = breakdown(tl, res.makespan);
    double own = b.compute_s;
    for (std::size_t c = 0; c < kNumCommClasses; ++c)
      if (c != static_cast<std::size_t>(CommClass::DP)) own += b.exposed_comm_s[c];
    std::vector<Interval> dp;
    for (const Interval& iv : tl.intervals)
      if (iv.category == dp_category)
        dp.push_back(Interval{iv.start, iv.end, 0, 0, kComputeCategory});  // blocks hold none
    period = std::max({period, own, breakdown(dp, res.makespan).compute_s});
  }
  return period;
}
}  // namespace

// Whether one rank per TP group gives, at flow fidelity, exactly what every
// rank gives (docs/network.md, "Group representatives"): the members of a
// TP group sit in one node on distinct NICs and time alike, so their flows
// are images of each other under a permutation of the rails, and no flow of
// one member shares a link with another member's. That needs no ECMP choice
// between routes (the hash would send the images to different spines): one
// spine or none or adaptive routing, one datacenter, and on a fat-tree one
// leaf (its uplinks would carry every rail). No GPU or link is perturbed.
bool group_representatives_exact(const Scenario& s) {
  const ClusterSpec& c = s.cluster;
  const ParallelSpec& p = s.parallel;
  if (c.groups.size() != 1 || !c.slowdowns.empty() || !s.link_perturbations.empty()) return false;
  const NodeSpec& node = c.groups[0].node;
  if (node.scaleup != ScaleupKind::NVSwitch || node.nic_count < node.gpus_per_node) return false;
  if (p.tp < 2 || node.gpus_per_node % p.tp != 0 || p.cp != 1 || p.ep != 1 || !p.stages.empty()) return false;
  if (!p.placement_gpus.empty() || p.placement_order.rfind("tp-", 0) != 0) return false;
  const FabricFacts f = fabric_facts(c);
  if (f.datacenters != 1) return false;
  const bool one_leaf = f.nodes_per_leaf >= f.nodes_per_datacenter;
  // Rail-optimised, one leaf per rail: a flow between rails (TP smaller than a node) crosses a spine.
  if (f.kind == FabricKind::FatTree) return one_leaf;
  // Adaptive routing leaves no choice either: a leaf's up-links are one bundle.
  return f.spines <= 1 || f.bundled_spines() || (one_leaf && p.tp == node.gpus_per_node);
}

namespace {
struct RankImages {
  int replicas = 0;                 // replicas simulated: [0, replicas)
  bool first_tp_rank_only = false;  // and of each of their TP groups only TP index 0
  LinkImages links;
};

// Rank images (docs/network.md, "Group representatives"): the smallest step
// of the data-parallel index that moves every rank's GPU by a permutation of
// whole nodes which keeps each GPU's index in its node and the nodes of a
// leaf under one leaf, and, on nodes whose GPUs each have their own NIC
// behind an NVSwitch, the rotation of the TP index inside every node; with
// the images of the links. nullopt where they leave every rank or the cluster
// or the job is not symmetric under them (node types, stragglers, degraded
// links, ECMP choices between spines, several datacenters, experts, per-stage
// layouts, uneven replicas, other workloads).
std::optional<RankImages> rank_images(const Scenario& s, Platform& platform) {
  const ClusterSpec& c = s.cluster;
  const ParallelSpec& p = s.parallel;
  if (s.workload.kind != WorkloadKind::Transformer || s.model.moe.enabled() || c.groups.size() != 1 ||
      !c.slowdowns.empty() || !s.link_perturbations.empty()) {
    return std::nullopt;
  }
  if (p.ep != 1 || !p.stages.empty() || !p.placement_gpus.empty() || p.uneven_shares()) return std::nullopt;
  const FabricFacts f = fabric_facts(c);
  if (f.datacenters != 1 || (f.spines > 1 && !f.bundled_spines())) return std::nullopt;
  const Cluster& cluster = platform.cluster();
  const NodeSpec& node = c.groups[0].node;
  const int per_node = node.gpus_per_node;
  const int nodes = cluster.num_nodes();
  if (static_cast<long>(p.tp) * p.cp * p.dp * p.pp != cluster.num_gpus()) return std::nullopt;
  const Placement placement = Placement::of(p);
  auto gpu = [&](int stage, int d, int cp, int tp) { return placement.gpu(RankCoord{tp, cp, 0, d, stage}); };
  auto for_each_rank = [&](auto&& visit) {
    bool ok = true;
    for (int st = 0; st < p.pp && ok; ++st) {
      for (int d = 0; d < p.dp && ok; ++d) {
        for (int cp = 0; cp < p.cp && ok; ++cp) {
          for (int tp = 0; tp < p.tp && ok; ++tp) ok = visit(st, d, cp, tp);
        }
      }
    }
    return ok;
  };
  // The TP rotation: inside a node, one permutation of places for every node.
  std::vector<int> place_image(per_node, -1);
  const bool rotate_tp = p.tp > 1 && node.scaleup == ScaleupKind::NVSwitch && node.nic_count == per_node &&
                         for_each_rank([&](int st, int d, int cp, int tp) {
                           const int g = gpu(st, d, cp, tp), h = gpu(st, d, cp, (tp + 1) % p.tp);
                           const bool same =
                               g / per_node == h / per_node &&
                               (place_image[g % per_node] < 0 || place_image[g % per_node] == h % per_node);
                           place_image[g % per_node] = h % per_node;
                           return same;
                         });
  for (int step = 1; step <= p.dp; ++step) {
    const int images = p.dp / step * (rotate_tp ? p.tp : 1);
    if (p.dp % step != 0 || images == 1) continue;
    // The node map of one step, and of leaf groups under it.
    std::vector<int> next(nodes, -1), next_leaf(nodes, -1);
    bool symmetric = for_each_rank([&](int st, int d, int cp, int tp) {
      const int g = gpu(st, d, cp, tp), h = gpu(st, (d + step) % p.dp, cp, tp);
      const int n = g / per_node, m = h / per_node;
      const int lg = f.leaf_group_of(n), lm = f.leaf_group_of(m);
      const bool same =
          g % per_node == h % per_node && (next[n] < 0 || next[n] == m) && (next_leaf[lg] < 0 || next_leaf[lg] == lm);
      next[n] = m;
      next_leaf[lg] = lm;
      return same;
    });
    // Leaf groups map one to one.
    std::vector<char> hit(nodes, 0);
    for (int lg = 0; lg < nodes && symmetric; ++lg) {
      if (next_leaf[lg] < 0) continue;
      symmetric = hit[next_leaf[lg]] == 0;
      hit[next_leaf[lg]] = 1;
    }
    if (!symmetric) continue;
    std::vector<int> gpu_rep(cluster.num_gpus(), -1);
    for_each_rank([&](int st, int d, int cp, int tp) {
      gpu_rep[gpu(st, d, cp, tp)] = gpu(st, d % step, cp, rotate_tp ? 0 : tp);
      return true;
    });
    if (std::optional<LinkImages> links = link_images(platform.topology(), std::move(gpu_rep), images)) {
      return RankImages{step, rotate_tp, std::move(*links)};
    }
  }
  return std::nullopt;
}
}  // namespace

std::unique_ptr<Workload> workload_of(const Scenario& s) {
  if (std::unique_ptr<Workload> w = make_workload(s.workload)) return w;
  return std::make_unique<TransformerWorkload>(s.model, s.parallel, s.training);
}

namespace {
JobRun run_job_with(const Scenario& s, Fidelity fidelity, MemoryCheck memory, bool allow_images, bool task_intervals);
}  // namespace

JobReport simulate(const Scenario& s, Fidelity fidelity, MemoryCheck memory) {
  // The report needs the timelines' breakdowns only, not an interval per task.
  return run_job_with(s, fidelity, memory, true, false).report;
}

JobRun run_job(const Scenario& s, Fidelity fidelity, MemoryCheck memory) {
  return run_job_with(s, fidelity, memory, true, true);
}

namespace {
// `allow_images`: off for the repeat of a run whose transfers broke the rank images' symmetry.
// `task_intervals`: the timelines keep an interval per task (traces and reports name them);
// else a stream's touching intervals of one category are merged (Executor::merge_intervals).
JobRun run_job_with(const Scenario& s, Fidelity fidelity, MemoryCheck memory, bool allow_images, bool task_intervals) {
  if (const std::unique_ptr<OuterLoop> outer = outer_loop_of(s)) return outer->run(s, fidelity);
  const auto t0 = std::chrono::steady_clock::now();
  JobRun run;
  JobReport& rep = run.report;
  rep.scenario = s.name;
  rep.fidelity = to_string(fidelity);
  Platform platform(s.cluster, s.profiles);
  const Cluster& cluster = platform.cluster();
  rep.gpus = cluster.num_gpus();
  PlanOptions opts;
  opts.representatives = fidelity != Fidelity::Flow;  // the flow model needs every member
  const bool groups_exact = group_representatives_exact(s);
  // Where both are exact, whichever simulates fewer ranks: one per TP group or
  // the rank images.
  std::optional<RankImages> images;
  if (fidelity == Fidelity::Flow && s.flow_ranks == FlowRanks::Auto && allow_images) images = rank_images(s, platform);
  if (images && groups_exact && images->links.images <= s.parallel.tp) images.reset();
  opts.group_representatives = fidelity == Fidelity::Flow && !images &&
                               (s.flow_ranks == FlowRanks::Groups || (s.flow_ranks == FlowRanks::Auto && groups_exact));
  if (images) {
    opts.simulated_replicas = images->replicas;
    opts.first_tp_rank_only = images->first_tp_rank_only;
  }
  apply_link_perturbations(s, fidelity, platform, nullptr);  // analytical: before planning reads the network
  run.plan = workload_of(s)->plan(platform, Placement::of(s.parallel), opts);
  const WorkloadPlan& plan = run.plan;
  rep.throughput_unit = plan.throughput_unit;
  rep.flops_convention = plan.flop_convention;
  check_stage_memory(plan, platform, rep);
  for (StageReport& sr : rep.per_stage) {
    sr.weight_versions = weight_versions(s.parallel.schedule, s.parallel.pp, sr.stage);
    sr.weight_staleness = weight_staleness(s.parallel.schedule, s.parallel.pp, sr.stage);
  }
  if (!rep.feasible && memory == MemoryCheck::BeforeSimulation) {
    rep.simulated = false;
    rep.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return run;
  }
  if (fidelity == Fidelity::Flow) {
    // Refused up front rather than dying of bad_alloc midway (docs/performance.md).
    double need = static_cast<double>(estimate_run_bytes(plan.setup, true));
    // Under ECMP each queue pair of a connection across spines is a flow: at most k times the flows.
    const FabricFacts facts = fabric_facts(s.cluster);
    if (facts.routing == FabricRouting::Ecmp && facts.qps_per_connection > 1) {
      need += (need - static_cast<double>(estimate_run_bytes(plan.setup, false))) * (facts.qps_per_connection - 1);
    }
    if (need > kFlowMemoryLimitBytes) {
      rep.feasible = false;
      rep.problems.push_back("flow fidelity would need about " + fmt("%.1f", need / kGiB) +
                             " GiB, above its limit of " + fmt("%.0f", kFlowMemoryLimitBytes / kGiB) +
                             " GiB (docs/performance.md); run at analytical fidelity or on fewer GPUs");
      rep.simulated = false;
      return run;
    }
  }
  const std::unique_ptr<NetworkModel> network = platform.network_model(fidelity);
  TRAINSIM_CHECK(network->needs_every_member() == !opts.representatives, "plan and network model disagree on members");
  apply_link_perturbations(s, fidelity, platform, network.get());
  track_wan_links(platform, *network, fidelity == Fidelity::Flow);
  if (images) network->set_link_images(std::move(images->links));
  {
    Executor exec(plan.setup, cluster, platform.costs(), *network);
    exec.merge_intervals(!task_intervals);
    run.result = exec.run();
    rep.warnings = network->warnings();
  }
  if (network->images_failed()) {
    // A transfer was not symmetric under the rank images: not exact, so again
    // without them (one rank per TP group where that is exact, else every rank).
    return run_job_with(s, fidelity, memory, false, task_intervals);
  }
  if (s.parallel.schedule == ScheduleKind::DualPipe) {
    rep.warnings.push_back(
        "dualpipe: the gradients of the two copies of each part of the model (on ranks i and pp-1-i) are summed "
        "after the backward (github.com/deepseek-ai/DualPipe); that exchange is not charged (docs/schedules.md)");
  }
  if (fidelity == Fidelity::Flow) {
    rep.flow_ranks = opts.simulated_replicas > 0 ? "images (exact)"
                     : opts.group_representatives && plan.setup.ranks.size() < static_cast<std::size_t>(rep.gpus)
                         ? (groups_exact ? "groups (exact)" : "groups")
                         : "all";
  }
  if (opts.group_representatives && !groups_exact) {
    const std::size_t ranks = plan.setup.ranks.size();
    rep.warnings.push_back(
        ranks < static_cast<std::size_t>(cluster.num_gpus())
            ? "flow.ranks \"groups\": " + std::to_string(ranks) + " of " + std::to_string(cluster.num_gpus()) +
                  " ranks simulated, one per TP/CP group; the flows of the groups' other members are left out, an "
                  "approximation (docs/network.md, \"Group representatives\")" +
                  (s.cluster.fabric.kind == FabricKind::FatTree
                       ? std::string("; on this fat-tree their contention on the leaf uplinks is missed too")
                       : std::string())
            : std::string("flow.ranks \"groups\": no TP/CP group could be represented by one rank; every rank was "
                          "simulated"));
  }
  // A profile without a GEMM curve for a precision the plan runs GEMMs in
  // times them at 100% of peak (EfficiencyCurve::at of an empty curve): say so.
  {
    std::set<std::pair<std::uint32_t, int>> program_types;
    for (const RankProgram& r : plan.setup.ranks) {
      program_types.emplace(r.program, r.gpu_type >= 0 ? r.gpu_type : cluster.gpu_type_of(r.gpu));
    }
    std::set<std::pair<int, int>> missing;  // (base GPU type, dtype)
    for (const auto& [program, type] : program_types) {
      for (const ComputeOp& op : plan.setup.programs[program].ops) {
        if (op.kind == OpKind::Gemm && platform.profile(type).gemm[static_cast<std::size_t>(op.dtype)].curve.empty()) {
          missing.emplace(cluster.base_gpu_type(type), static_cast<int>(op.dtype));
        }
      }
    }
    for (const auto& [type, dtype] : missing) {
      rep.warnings.push_back("the calibration profile of " + cluster.gpu_type(type).name + " has no " +
                             to_string(static_cast<Dtype>(dtype)) +
                             " GEMM curve: its GEMMs in that precision are timed at 100% of peak");
    }
  }
  // Communicators spanning GPU vendors (docs/heterogeneous.md): timed at their
  // slowest member's links; a multi-vendor library's staging through host memory is not charged.
  int cross_vendor = 0;
  {
    // Vendors numbered per GPU type once, so that members compare integers.
    std::vector<int> vendor_of_type(cluster.num_gpu_types());
    for (int t = 0; t < cluster.num_gpu_types(); ++t) {
      vendor_of_type[t] = t;
      for (int u = 0; u < t && vendor_of_type[t] == t; ++u) {
        if (cluster.gpu_type(u).vendor == cluster.gpu_type(t).vendor) vendor_of_type[t] = vendor_of_type[u];
      }
    }
    for (const Communicator& c : plan.setup.comms) {
      if (cluster.num_gpu_types() == 1) break;  // one type, one vendor
      if (c.members.empty()) continue;
      const int first = vendor_of_type[cluster.gpu_type_of(c.members.front())];
      bool mixed = false;
      for (int g : c.members) mixed = mixed || vendor_of_type[cluster.gpu_type_of(g)] != first;
      cross_vendor += mixed ? 1 : 0;
    }
  }
  if (cross_vendor > 0) {
    rep.warnings.push_back(std::to_string(cross_vendor) +
                           " communicator(s) span GPU vendors: timed at the slowest member's NIC and scale-up figures; "
                           "the staging through host memory of a multi-vendor collective library is not charged "
                           "(docs/heterogeneous.md)");
  }
  const SimulationResult& res = run.result;
  rep.wan = wan_crossings(cluster, plan.setup.comms);
  rep.wan_links = wan_link_loads(platform, plan.setup, *network, fidelity == Fidelity::Flow, res.makespan.to_seconds(),
                                 rep.warnings);

  rep.events = res.events;
  rep.simulated_ranks = static_cast<int>(plan.setup.ranks.size());
  rep.expert_rank_tokens = plan.expert_rank_tokens;
  rep.expert_dropped_fraction = plan.expert_dropped_fraction;
  rep.dp_shares = plan.dp_shares;
  rep.cp_shares = plan.cp_shares;
  rep.head_shares = plan.head_shares;
  rep.cp_pace_rank = plan.cp_pace_rank;
  rep.iteration_time_s = res.makespan.to_seconds();
  if (s.training.post_validation && res.completed) {
    // Post-validation: every rank steps and starts its next iteration as soon as
    // it is done, so iterations overlap and their period is the longest span of
    // a rank (its first compute to its finish) rather than one iteration alone.
    double span = 0;
    for (const RankTimeline& tl : res.timelines) {
      Time first = res.makespan;
      for (const Interval& iv : tl.intervals) {
        if (iv.category == kComputeCategory) first = std::min(first, iv.start);
        if (iv.category == kBlockCategory) first = std::min(first, tl.blocks[iv.task].first_compute);
      }
      if (first < res.makespan) span = std::max(span, (res.finish[tl.rank] - first).to_seconds());
    }
    if (span > 0 && span < rep.iteration_time_s) {
      rep.single_iteration_s = rep.iteration_time_s;
      rep.iteration_time_s = span;
    }
  }
  if (asynchronous_pipeline(s.parallel.schedule) && res.completed) {
    const double period = steady_pipeline_period(res);
    if (period > 0 && period < rep.iteration_time_s) {
      rep.single_iteration_s = rep.iteration_time_s;
      rep.iteration_time_s = period;
    }
  }
  // The figures of a run that reached the clock's limit may have saturated: refused, never reported.
  const bool beyond_clock = res.makespan >= Time::saturated();
  if (beyond_clock) {
    rep.iteration_time_s = 0;
    rep.feasible = false;
    rep.problems.push_back(
        "the simulated iteration would take longer than the simulator's clock can count (about 146 years); check the "
        "model size, the batch and the calibration profile's efficiencies");
  }
  if (rep.iteration_time_s > 0) {
    rep.samples_per_s = plan.samples_per_iteration / rep.iteration_time_s;
    rep.units_per_s = plan.units_per_iteration / rep.iteration_time_s;
    if (plan.throughput_unit == "tokens") rep.tokens_per_s = rep.units_per_s;
    rep.tflops_per_gpu = plan.model_flops / rep.iteration_time_s / rep.gpus / 1e12;
    std::vector<double> peak_of_type(cluster.num_gpu_types());
    for (int t = 0; t < cluster.num_gpu_types(); ++t) peak_of_type[t] = cluster.gpu_type(t).peak(plan.peak_dtype);
    // One GPU type: its peak times the GPU count (no pass over every GPU);
    // several (or slowed GPUs): summed GPU by GPU.
    double peak = 0;
    if (cluster.num_gpu_types() == 1) {
      peak = peak_of_type[0] * cluster.num_gpus();
    } else {
      for (int g = 0; g < cluster.num_gpus(); ++g) peak += peak_of_type[cluster.gpu_type_of(g)];
    }
    rep.mfu = plan.model_flops / rep.iteration_time_s / peak;
    rep.hfu = plan.hardware_flops / rep.iteration_time_s / peak;
  }
  if (!res.completed) {
    rep.feasible = false;
    // Members posting different transfers is a planner bug, never bad input.
    if (res.mismatch) {
      std::string posts;
      for (const WaitingTask& w : res.deadlock) posts += "; " + w.rank + " '" + w.task + "' " + w.reason;
      TRAINSIM_CHECK(!res.mismatch, "members of one communicator posted different transfers" + posts);
    }
    rep.problems.push_back("deadlock: " + std::to_string(res.deadlocked_ranks) + " rank(s) can never finish");
    for (const WaitingTask& w : res.deadlock) {
      rep.problems.push_back("  " + w.rank + ", stream " + w.stream + ", task '" + w.task + "': " + w.reason);
    }
  }

  double best_compute = -1;
  for (int st = 0; st < static_cast<int>(plan.stages.size()); ++st) {
    StageReport& sr = rep.per_stage[static_cast<std::size_t>(st)];
    const int rank = plan.recorded_rank_of_stage[st];
    for (const auto& tl : res.timelines) {
      if (static_cast<int>(tl.rank) == rank) sr.time = breakdown(tl, res.makespan);
    }
    double slowest_peak = -1;
    std::string slowest;
    for (int t : plan.stages[st].gpu_types) {
      const GpuSpec& g = cluster.gpu_type(t);
      const double peak = g.peak(plan.peak_dtype) / g.slowdown;
      if (slowest_peak < 0 || peak < slowest_peak) slowest_peak = peak, slowest = g.name;
    }
    if (sr.time.compute_s > best_compute) {
      best_compute = sr.time.compute_s;
      rep.breakdown = sr.time;
      rep.pace_stage = st;
      rep.pace_gpu = slowest;
    }
  }
  for (int t = 0; t < cluster.num_gpu_types(); ++t) {
    const SlowestGpu& slow = platform.costs().slowest_gpu(t);
    if (cluster.base_gpu_type(t) != t || slow.factor <= 1.0) continue;
    rep.slowest_gpus.push_back(SlowestGpuReport{cluster.gpu_type(t).name, slow.gpus, slow.spread, slow.factor});
  }
  if (!s.cluster.slowdowns.empty() || !s.link_perturbations.empty()) {
    PerturbationReport p;
    p.degraded_links = static_cast<int>(s.link_perturbations.size());
    p.slowed_gpus = static_cast<int>(s.cluster.slowdowns.size());
    for (const GpuSlowdown& g : s.cluster.slowdowns) {
      p.max_slowdown = std::max(p.max_slowdown, cluster.gpu_type(cluster.gpu_type_of(g.gpu)).peak_slowdown());
    }
    for (std::size_t r = 0; r < plan.setup.ranks.size(); ++r) {
      const RankProgram& rank = plan.setup.ranks[r];
      const double f =
          cluster.gpu_type(rank.gpu_type >= 0 ? rank.gpu_type : cluster.gpu_type_of(rank.gpu)).peak_slowdown();
      if (f == p.max_slowdown && p.slowest_rank.empty()) {
        p.slowest_rank = plan.setup.ranks[r].name;
        p.slowest_stage = plan.stage_of_rank[r];
      }
    }
    Scenario unperturbed = s;
    unperturbed.cluster.slowdowns.clear();
    unperturbed.link_perturbations.clear();
    unperturbed.perturbation_sources.clear();
    unperturbed.reliability.reset();
    p.unperturbed_iteration_time_s = run_job(unperturbed, fidelity).report.iteration_time_s;
    p.lost_s = rep.iteration_time_s - p.unperturbed_iteration_time_s;
    const std::vector<PerturbationSource>& sources = s.perturbation_sources;
    p.entries = static_cast<int>(sources.size());
    if (sources.size() == 1) {
      p.each.push_back({sources.front().pointer, p.lost_s});
    } else if (sources.size() <= kMaxAttributedPerturbations) {
      for (const PerturbationSource& src : sources) {
        Scenario alone = unperturbed;
        alone.cluster.slowdowns = src.slowdowns;
        if (src.link >= 0) alone.link_perturbations.push_back(s.link_perturbations[src.link]);
        const double t = run_job(alone, fidelity).report.iteration_time_s;
        p.each.push_back({src.pointer, t - p.unperturbed_iteration_time_s});
      }
    }
    rep.perturbations = p;
  }
  if (s.reliability && rep.feasible) rep.reliability = job_life(*s.reliability, rep, plan, cluster, s.file);
  rep.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}
}  // namespace

StageKernels stage_kernels(const Scenario& s, int stage) {
  const Platform platform(s.cluster, s.profiles);
  const Cluster& cluster = platform.cluster();
  const ComputeCostModel& costs = platform.costs();
  const WorkloadPlan plan = workload_of(s)->plan(platform, Placement::of(s.parallel), PlanOptions{});
  const ProgramTemplate& prog = plan.setup.programs.at(static_cast<std::size_t>(stage));
  const int type = cluster.gpu_type_of(plan.setup.ranks[plan.recorded_rank_of_stage[stage]].gpu);
  StageKernels out;
  out.stage = stage;
  out.gpu = cluster.gpu_type(type).name;
  std::map<std::string, KernelRow> rows;
  for (const Task& t : prog.tasks) {
    if (t.kind != TaskKind::Compute) continue;
    const ComputeOp& op = prog.ops[t.ref];
    const std::string phase(prog.labels[t.label].substr(0, 1));
    const std::string name = (phase == "R" ? "R " : "") + op.name;
    KernelRow& r = rows[name];
    r.op = name;
    const double sec = costs.duration(op, type).to_seconds();
    r.seconds += sec;
    r.flops += op.flops;
    r.bytes += op.bytes;
    r.count += 1;
    out.total_seconds += sec;
  }
  for (auto& [name, r] : rows) out.rows.push_back(std::move(r));
  std::stable_sort(out.rows.begin(), out.rows.end(),
                   [](const KernelRow& a, const KernelRow& b) { return a.seconds > b.seconds; });
  return out;
}

std::string kernel_table(const Scenario& s, int stage) {
  const StageKernels k = stage_kernels(s, stage);
  std::string out = "kernels of stage " + std::to_string(stage) + " (" + k.gpu + "), compute total " +
                    fmt("%.3f", k.total_seconds) + " s\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-28s %8s %9s %7s %10s %10s\n", "op", "count", "time s", "share", "TFLOP/s",
                "GB/s");
  out += line;
  for (const KernelRow& r : k.rows) {
    std::snprintf(line, sizeof line, "  %-28s %8d %9.4f %6.1f%% %10.1f %10.1f\n", r.op.c_str(), r.count, r.seconds,
                  100 * r.seconds / k.total_seconds, r.flops / r.seconds / 1e12, r.bytes / r.seconds / 1e9);
    out += line;
  }
  return out;
}

nlohmann::json kernels_json(const Scenario& s) {
  nlohmann::json stages = nlohmann::json::array();
  for (int st = 0; st < s.parallel.pp; ++st) {
    const StageKernels k = stage_kernels(s, st);
    nlohmann::json rows = nlohmann::json::array();
    for (const KernelRow& r : k.rows) {
      rows.push_back(
          {{"op", r.op}, {"count", r.count}, {"seconds", r.seconds}, {"flops", r.flops}, {"bytes", r.bytes}});
    }
    stages.push_back({{"stage", k.stage}, {"gpu", k.gpu}, {"compute_s", k.total_seconds}, {"kernels", rows}});
  }
  return stages;
}

namespace {
nlohmann::json breakdown_json(const TimeBreakdown& b) {
  nlohmann::json exposed;
  for (std::size_t c = 0; c < kNumCommClasses; ++c) exposed[to_string(static_cast<CommClass>(c))] = b.exposed_comm_s[c];
  return {{"compute_s", b.compute_s}, {"exposed_comm_s", exposed}, {"bubble_s", b.bubble_s}, {"idle_s", b.idle_s}};
}
}  // namespace

namespace {
nlohmann::json reliability_json(const ReliabilityReport& r) {
  nlohmann::json comps = nlohmann::json::array();
  for (const auto& c : r.by_component) comps.push_back({{"component", c.component}, {"expected", c.expected}});
  return {{"duration_days", r.duration_s / 86400},
          {"interruptions_expected", r.interruptions_expected},
          {"unexpected_expected", r.unexpected_expected},
          {"planned_expected", r.planned_expected},
          {"by_component", comps},
          {"mtbf_h", r.mtbf_s / 3600},
          {"checkpoint_gib", r.checkpoint_bytes / kGiB},
          {"checkpoint_stall_s", r.checkpoint_stall_s},
          {"checkpoint_write_s", r.checkpoint_write_s},
          {"reload_s", r.reload_s},
          {"restart_s", r.restart_s},
          {"checkpoint_interval_s", r.checkpoint_interval_s},
          {"optimal_interval_s", r.optimal_interval_s},
          {"ettr_analytic", r.ettr_analytic},
          {"trials", r.trials},
          {"ettr", r.ettr_mean},
          {"ettr_p05", r.ettr_p05},
          {"ettr_p95", r.ettr_p95},
          {"interruptions_mean", r.interruptions_mean},
          {"lost_hours",
           {{"lost_work", r.lost_work_s / 3600},
            {"restart", r.restart_time_s / 3600},
            {"checkpoint", r.checkpoint_time_s / 3600},
            {"spare_wait", r.spare_wait_s / 3600}}},
          {"goodput_per_s", r.goodput_units_per_s}};
}

// Uneven data-parallel shares grouped by count, in the order of their first replica.
struct DistinctShare {
  int micro_batches = 0;
  int replicas = 0;
  int first = 0;
};
std::vector<DistinctShare> distinct_shares(const std::vector<int>& shares) {
  std::vector<DistinctShare> out;
  for (std::size_t d = 0; d < shares.size(); ++d) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const DistinctShare& x) { return x.micro_batches == shares[d]; });
    if (it == out.end()) {
      out.push_back({shares[d], 1, static_cast<int>(d)});
    } else {
      ++it->replicas;
    }
  }
  return out;
}
}  // namespace

nlohmann::json to_json(const JobReport& r) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : r.per_stage) {
    stages.push_back({{"stage", s.stage},
                      {"layers", s.layers},
                      {"breakdown", breakdown_json(s.time)},
                      {"memory_gib",
                       {{"weights", s.memory.weights / kGiB},
                        {"gradients", s.memory.gradients / kGiB},
                        {"optimizer", s.memory.optimizer / kGiB},
                        {"activations", s.memory.activations / kGiB},
                        {"buffers", s.memory.buffers / kGiB},
                        {"total", s.memory.total() / kGiB},
                        {"capacity", s.memory_capacity / kGiB}}},
                      {"gpus", s.gpus}});
    if (s.weight_versions > 1) {
      stages.back()["weight_versions"] = s.weight_versions;
      stages.back()["weight_staleness"] = s.weight_staleness;
    }
  }
  nlohmann::json out = {{"scenario", r.scenario},
                        {"gpus", r.gpus},
                        {"iteration_time_s", r.iteration_time_s},
                        {"tokens_per_s", r.tokens_per_s},
                        {"samples_per_s", r.samples_per_s},
                        {"tflops_per_gpu", r.tflops_per_gpu},
                        {"mfu", r.mfu},
                        {"hfu", r.hfu},
                        {"peak_memory_gib", r.peak_memory_gib},
                        {"breakdown", breakdown_json(r.breakdown)},
                        {"pace", {{"stage", r.pace_stage}, {"gpu", r.pace_gpu}}},
                        {"per_stage", stages},
                        {"feasible", r.feasible},
                        {"simulated", r.simulated},
                        {"problems", r.problems},
                        {"events", r.events},
                        {"simulated_ranks", r.simulated_ranks},
                        {"wall_time_s", r.wall_time_s}};
  if (!r.warnings.empty()) out["warnings"] = r.warnings;
  if (r.single_iteration_s > 0) out["single_iteration_s"] = r.single_iteration_s;
  // The workload's own throughput unit (tokens for transformers) and the fidelity the figures come from.
  out["throughput"] = {{"unit", r.throughput_unit}, {"per_s", r.units_per_s}};
  out["fidelity"] = r.fidelity;
  if (!r.flow_ranks.empty()) out["flow_ranks"] = r.flow_ranks;
  if (!r.expert_rank_tokens.empty()) {
    out["expert_load"] = {{"rank_tokens", r.expert_rank_tokens}, {"dropped_fraction", r.expert_dropped_fraction}};
  }
  if (!r.dp_shares.empty()) {
    // Per distinct share: its micro-batches, how many replicas run it and the first of them.
    nlohmann::json shares = nlohmann::json::array();
    for (const DistinctShare& d : distinct_shares(r.dp_shares))
      shares.push_back({{"micro_batches", d.micro_batches}, {"replicas", d.replicas}, {"first_replica", d.first}});
    out["dp_shares"] = shares;
  }
  if (!r.cp_shares.empty()) out["cp_shares"] = {{"tokens", r.cp_shares}, {"pace_rank", r.cp_pace_rank}};
  if (!r.head_shares.empty()) out["head_shares"] = {{"heads", r.head_shares}, {"pace_rank", r.cp_pace_rank}};
  out["flops_convention"] = r.flops_convention;
  if (r.reliability) out["reliability"] = reliability_json(*r.reliability);
  if (!r.slowest_gpus.empty()) {
    nlohmann::json slowest = nlohmann::json::array();
    for (const SlowestGpuReport& g : r.slowest_gpus)
      slowest.push_back({{"gpu", g.gpu}, {"gpus", g.gpus}, {"spread", g.spread}, {"factor", g.factor}});
    out["slowest_gpu"] = slowest;
  }
  if (r.perturbations) {
    const PerturbationReport& p = *r.perturbations;
    out["perturbations"] = {{"slowed_gpus", p.slowed_gpus},
                            {"degraded_links", p.degraded_links},
                            {"max_slowdown", p.max_slowdown},
                            {"slowest_rank", p.slowest_rank},
                            {"slowest_stage", p.slowest_stage},
                            {"unperturbed_iteration_time_s", p.unperturbed_iteration_time_s},
                            {"lost_s", p.lost_s}};
    nlohmann::json each = nlohmann::json::array();
    for (const PerturbationReport::Source& src : p.each)
      each.push_back({{"entry", src.pointer}, {"lost_s", src.lost_s}});
    out["perturbations"]["each"] = each;
  }
  if (!r.wan.empty()) {
    nlohmann::json wan = nlohmann::json::array();
    for (const WanCrossing& w : r.wan) wan.push_back({{"kind", w.kind}, {"crossing", w.crossing}, {"total", w.total}});
    out["wan_communicators"] = wan;
  }
  if (!r.wan_links.empty()) {
    nlohmann::json links = nlohmann::json::array();
    for (const WanLinkLoad& w : r.wan_links) {
      links.push_back({{"sites", {w.site_a, w.site_b}},
                       {"links", w.links},
                       {"bytes_per_iteration", w.bytes},
                       {"utilization", w.utilization},
                       {"busy_fraction", w.busy_fraction >= 0 ? nlohmann::json(w.busy_fraction) : nlohmann::json()},
                       {"communicators", w.kinds}});
    }
    out["wan_links"] = links;
  }
  if (r.diloco) {
    const DilocoReport& d = *r.diloco;
    out["diloco"] = {{"sites", d.sites},
                     {"inner_steps", d.spec.inner_steps},
                     {"outer_precision", d.spec.outer_precision},
                     {"fragments", d.spec.fragments},
                     {"overlap_steps", d.spec.overlap_steps},
                     {"inner_step_s", d.inner_step_s},
                     {"fragment_sync_s", d.fragment_sync_s},
                     {"exposed_sync_s", d.timing.exposed_sync_s},
                     {"outer_compute_s", d.timing.outer_compute_s},
                     {"outer_step_s", d.timing.outer_step_s},
                     {"compute_utilization", d.timing.compute_utilization},
                     {"wan_bytes_per_outer_step", d.wan_bytes_per_outer_step},
                     {"wan_bytes_per_token", d.wan_bytes_per_token},
                     {"dp_wan_bytes_per_token", d.dp_wan_bytes_per_token},
                     {"outer_state_gib", d.outer_state_gib}};
  }
  return out;
}

std::string summary_text(const JobReport& r) {
  // The breakdown covers one iteration alone.
  const double it = r.single_iteration_s > 0 ? r.single_iteration_s : r.iteration_time_s > 0 ? r.iteration_time_s : 1;
  const TimeBreakdown& b = r.breakdown;
  std::string out = r.scenario + " on " + std::to_string(r.gpus) + " GPUs\n";
  if (!r.simulated) {
    out += "  not simulated: the job was refused before simulation (why: below) | peak mem " +
           fmt("%.1f", r.peak_memory_gib) + " GiB/GPU\n";
    for (const auto& w : r.warnings) out += "  warning: " + w + "\n";
    return out;
  }
  std::string rate = r.throughput_unit == "tokens" ? fmt("%.0f", r.tokens_per_s) + " tokens/s"
                                                   : fmt("%.4g", r.units_per_s) + " " + r.throughput_unit + "/s";
  if (r.throughput_unit != "tokens" && r.throughput_unit != "samples") {
    rate += " (" + fmt("%.4g", r.samples_per_s) + " samples/s)";
  }
  const std::string iteration =
      r.throughput_unit == "tokens" ? fmt("%.3f", r.iteration_time_s) : fmt("%.4g", r.iteration_time_s);
  out += "  iteration " + iteration + " s | " + rate + " | " + fmt("%.1f", r.tflops_per_gpu) + " TFLOP/s/GPU | MFU " +
         fmt("%.1f", 100 * r.mfu) + "% | peak mem " + fmt("%.1f", r.peak_memory_gib) + " GiB/GPU\n";
  bool asynchronous = false;
  for (const auto& st : r.per_stage) asynchronous = asynchronous || st.weight_versions > 1;
  if (r.single_iteration_s > 0) {
    out += std::string(asynchronous ? "  no pipeline flush" : "  post-validation") +
           ": iterations overlap; one iteration alone takes " + fmt("%.3f", r.single_iteration_s) +
           " s (the shares below)\n";
  }
  if (asynchronous) {
    out += "  weight versions per stage:";
    for (const auto& st : r.per_stage) out += " " + std::to_string(st.weight_versions);
    out += "; staleness (optimizer steps):";
    for (const auto& st : r.per_stage) out += " " + std::to_string(st.weight_staleness);
    out += "\n";
  }
  out += "  compute " + fmt("%.1f", 100 * b.compute_s / it) + "%";
  for (std::size_t c = 0; c < kNumCommClasses; ++c) {
    if (b.exposed_comm_s[c] > 0) {
      out += "  exposed " + std::string(to_string(static_cast<CommClass>(c))) + " " +
             fmt("%.1f", 100 * b.exposed_comm_s[c] / it) + "%";
    }
  }
  out += "  pipeline bubble " + fmt("%.1f", 100 * b.bubble_s / it) + "%";
  if (b.idle_s > 0) out += "  idle " + fmt("%.1f", 100 * b.idle_s / it) + "%";
  out += "\n";
  bool mixed = false;
  for (const auto& st : r.per_stage) mixed = mixed || st.gpus != r.per_stage.front().gpus || st.gpus.size() > 1;
  if (mixed) out += "  pace set by stage " + std::to_string(r.pace_stage) + " (" + r.pace_gpu + ")\n";
  if (!r.dp_shares.empty()) {
    out += "  dp shares (micro-batches x replicas):";
    for (const DistinctShare& d : distinct_shares(r.dp_shares))
      out += " " + std::to_string(d.micro_batches) + " x " + std::to_string(d.replicas);
    out += "\n";
  }
  if (!r.cp_shares.empty()) {
    out += "  cp shares (tokens):";
    for (int t : r.cp_shares) out += " " + std::to_string(t);
    out += "; pace set by cp rank " + std::to_string(r.cp_pace_rank) + "\n";
  }
  if (!r.head_shares.empty()) {
    out += "  head shares (heads per tp rank):";
    for (int h : r.head_shares) out += " " + std::to_string(h);
    out += r.cp_shares.empty() ? "; pace set by cp rank " + std::to_string(r.cp_pace_rank) + "\n" : "\n";
  }
  out += "  " + std::to_string(r.events) + " events, " + std::to_string(r.simulated_ranks) + " simulated ranks" +
         (r.flow_ranks.empty() || r.flow_ranks == "all" ? std::string() : " (flow.ranks " + r.flow_ranks + ")") + ", " +
         fmt("%.3f", r.wall_time_s) + " s wall\n";
  for (const auto& w : r.warnings) out += "  warning: " + w + "\n";
  for (const SlowestGpuReport& g : r.slowest_gpus) {
    out += "  slowest of " + std::to_string(g.gpus) + " " + g.gpu + ": x" + fmt("%.3f", g.factor) +
           " the median GPU (speed spread " + fmt("%.1f", 100 * g.spread) + "%), every GPU waits for it\n";
  }
  if (r.perturbations) {
    const PerturbationReport& p = *r.perturbations;
    out += "  perturbations: " + std::to_string(p.slowed_gpus) + " slowed GPU(s)";
    if (p.slowed_gpus > 0) {
      out += ", slowest x" + fmt("%.2f", p.max_slowdown) + " (" + p.slowest_rank + ", stage " +
             std::to_string(p.slowest_stage) + ")";
    }
    if (p.degraded_links > 0) out += ", " + std::to_string(p.degraded_links) + " degraded link(s)";
    out += " | " + fmt("%.3f", p.lost_s) + " s lost per iteration (" +
           fmt("%.1f", 100 * p.lost_s / std::max(p.unperturbed_iteration_time_s, 1e-12)) + "% over " +
           fmt("%.3f", p.unperturbed_iteration_time_s) + " s unperturbed)\n";
    if (p.each.size() > 1) {
      for (const PerturbationReport::Source& src : p.each) {
        out += "    " + src.pointer + " alone: " + fmt("%.3f", src.lost_s) + " s lost\n";
      }
    } else if (p.each.empty() && p.entries > 1) {
      out += "    " + std::to_string(p.entries) + " entries: above " + std::to_string(kMaxAttributedPerturbations) +
             ", not costed one by one\n";
    }
  }
  if (!r.wan.empty()) {
    out += "  across the WAN:";
    for (const WanCrossing& w : r.wan) {
      out += " " + w.kind + " " + std::to_string(w.crossing) + "/" + std::to_string(w.total);
    }
    out += " communicators (of the simulated ranks)\n";
  }
  for (const WanLinkLoad& w : r.wan_links) {
    out += "  WAN site " + std::to_string(w.site_a) + " - site " + std::to_string(w.site_b) + " (" +
           std::to_string(w.links) + " link(s)): " + fmt("%.3g", w.bytes) + " B/iteration, utilisation " +
           fmt("%.1f", 100 * w.utilization) + "%";
    if (w.busy_fraction >= 0) out += ", busiest link busy " + fmt("%.1f", 100 * w.busy_fraction) + "%";
    out += " |";
    for (const std::string& k : w.kinds) out += " " + k;
    out += "\n";
  }
  if (r.diloco) {
    const DilocoReport& d = *r.diloco;
    out += "  diloco: " + std::to_string(d.sites) + " sites, H " + std::to_string(d.spec.inner_steps) + ", " +
           std::to_string(d.spec.fragments) + " fragment(s), " + d.spec.outer_precision + " | outer step " +
           fmt("%.2f", d.timing.outer_step_s) + " s (inner " + fmt("%.3f", d.inner_step_s) + " s, sync " +
           fmt("%.2f", d.fragment_sync_s * d.spec.fragments) + " s, exposed " + fmt("%.2f", d.timing.exposed_sync_s) +
           " s) | compute utilisation " + fmt("%.1f", 100 * d.timing.compute_utilization) + "% | WAN " +
           fmt("%.3g", d.wan_bytes_per_token) + " B/token (data parallel " + fmt("%.3g", d.dp_wan_bytes_per_token) +
           ")\n";
  }
  if (r.reliability) {
    const ReliabilityReport& f = *r.reliability;
    out += "  over " + fmt("%.0f", f.duration_s / 86400) + " days: " + fmt("%.0f", f.interruptions_expected) +
           " interruptions expected (" + fmt("%.0f", f.unexpected_expected) + " unexpected, MTBF " +
           fmt("%.2f", f.mtbf_s / 3600) + " h; " + fmt("%.0f", f.planned_expected) + " planned)\n";
    out += "  checkpoint " + fmt("%.0f", f.checkpoint_bytes / kGiB) + " GiB every " +
           fmt("%.0f", f.checkpoint_interval_s / 60) + " min (stall " + fmt("%.1f", f.checkpoint_stall_s) +
           " s; Young/Daly optimum " + fmt("%.0f", f.optimal_interval_s / 60) + " min), restart " +
           fmt("%.0f", (f.restart_s + f.reload_s) / 60) + " min\n";
    out += "  effective training time " + fmt("%.1f", 100 * f.ettr_mean) + "% (" + fmt("%.1f", 100 * f.ettr_p05) + "-" +
           fmt("%.1f", 100 * f.ettr_p95) + "% in " + std::to_string(f.trials) + " trials; analytic " +
           fmt("%.1f", 100 * f.ettr_analytic) + "%) | goodput " + fmt("%.0f", f.goodput_units_per_s) + " " +
           r.throughput_unit + "/s\n";
  }
  if (!r.feasible) {
    out += "  INFEASIBLE:\n";
    for (const auto& p : r.problems) out += "  " + p + "\n";
  }
  return out;
}

double metric_value(const JobReport& r, const std::string& metric) {
  if (metric == "iteration_time_s") return r.iteration_time_s;
  if (metric == "tokens_per_s") return r.tokens_per_s;
  if (metric == "tflops_per_gpu") return r.tflops_per_gpu;
  if (metric == "mfu") return r.mfu;
  if (metric == "samples_per_s") return r.samples_per_s;
  if (metric == "hfu") return r.hfu;
  if (metric == "peak_memory_gib") return r.peak_memory_gib;
  if (metric == "units_per_s") return r.units_per_s;
  if (metric == "ettr") return r.reliability ? r.reliability->ettr_mean : 0.0;
  if (metric == "compute_utilization") return r.diloco ? r.diloco->timing.compute_utilization : 1.0;
  if (metric == "wan_bytes_per_token") return r.diloco ? r.diloco->wan_bytes_per_token : 0.0;
  if (metric == "goodput_per_s") return r.reliability ? r.reliability->goodput_units_per_s : 0.0;
  TRAINSIM_CHECK(false, "no result field named \"" + metric + "\"");
  return 0;
}

}  // namespace trainsim
