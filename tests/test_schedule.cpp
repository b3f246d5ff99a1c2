// Schedules as units, explicit placement and computed equivalence classes
// (models/schedule.hpp, models/placement.hpp, models/planner.cpp).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "model_fixtures.hpp"
#include "models/planner.hpp"
#include "models/schedule.hpp"
#include "sim/executor.hpp"
#include "sim/platform.hpp"
#include "sim_fixtures.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

ScheduleUnit F(int mb, int chunk = 0) { return {UnitKind::Forward, mb, chunk}; }
ScheduleUnit BW(int mb, int chunk = 0) { return {UnitKind::Backward, mb, chunk}; }
ScheduleUnit B(int mb, int chunk = 0) { return {UnitKind::BackwardInput, mb, chunk}; }
ScheduleUnit W(int mb, int chunk = 0) { return {UnitKind::BackwardWeight, mb, chunk}; }

PipelineSchedule two_stage(std::vector<ScheduleUnit> s0, std::vector<ScheduleUnit> s1, int m) {
  PipelineSchedule s;
  s.stages = 2;
  s.microbatches = m;
  s.chunk_stage = {0, 1};
  s.units = {std::move(s0), std::move(s1)};
  return s;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += x + "\n";
  return out;
}

// Iteration time of `par` on `cluster` with ideal profiles (analytical network).
double iteration_seconds(const TransformerSpec& m, const ParallelSpec& par, const TrainingSpec& train,
                         const ClusterSpec& spec, const std::vector<CalibrationProfile>& profiles, bool reps,
                         int* simulated = nullptr) {
  Platform platform(spec, profiles);
  PlanOptions opts;
  opts.representatives = reps;
  const WorkloadPlan plan = TransformerWorkload(m, par, train).plan(platform, Placement::of(par), opts);
  if (simulated != nullptr) *simulated = static_cast<int>(plan.setup.ranks.size());
  auto net = platform.network_model(Fidelity::Analytical);
  Executor ex(plan.setup, platform.cluster(), platform.costs(), *net);
  const SimulationResult r = ex.run();
  REQUIRE(r.completed);
  return r.makespan.to_seconds();
}

}  // namespace

TEST_CASE("schedules: every built-in schedule passes its own check, units walk to the old in-flight counts") {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B}) {
    for (int pp : {1, 2, 4, 8}) {
      for (int m : {1, 4, 8, 16, 32}) {
        const int vpp = kind == ScheduleKind::Interleaved1F1B ? 3 : 1;
        if (kind == ScheduleKind::Interleaved1F1B && (pp < 2 || m % pp != 0)) continue;
        CAPTURE(to_string(kind));
        CAPTURE(pp);
        CAPTURE(m);
        const PipelineSchedule s = builtin_schedule(kind, pp, m, vpp);
        CHECK(joined(check_schedule(s)).empty());
        // One byte per chunk's micro-batch: the walk counts the chunks in flight.
        const double first = peak_activation_bytes(s, 0, [](int) { return ChunkActivation{1, 0}; });
        const double expected = kind == ScheduleKind::GPipe      ? m
                                : kind == ScheduleKind::OneFOneB ? std::min(pp, m)
                                                                 : std::min(2 * (pp - 1) + (vpp - 1) * pp + 1, m * vpp);
        CHECK(first == expected);
      }
    }
  }
}

TEST_CASE("schedules: the check names a missing unit, a W before its B, an out-of-order link and a deadlock") {
  SUBCASE("valid: 1F1B with split backward, W deferred") {
    const auto s = two_stage({F(0), F(1), B(0), F(2), B(1), W(0), B(2), W(1), W(2)},
                             {F(0), B(0), F(1), B(1), W(0), F(2), B(2), W(1), W(2)}, 3);
    CHECK(joined(check_schedule(s)).empty());
  }
  SUBCASE("missing unit") {
    const auto s = two_stage({F(0), F(1), BW(0), BW(1)}, {F(0), BW(0), F(1)}, 2);
    CHECK(joined(check_schedule(s)) ==
          "pipeline rank 1: the backward (B or BW) of micro-batch 1, chunk 0 is missing\n");
  }
  SUBCASE("W before B, twice the same unit") {
    const auto s = two_stage({F(0), W(0), B(0), F(1), BW(1)}, {F(0), BW(0), F(0), BW(1)}, 2);
    CHECK(joined(check_schedule(s)) ==
          "pipeline rank 0, unit 1 (W0): W before the B it belongs to\n"
          "pipeline rank 1, unit 2 (F0): appears twice\n"
          "pipeline rank 1, unit 3 (BW1): backward before the forward of the same micro-batch and chunk\n"
          "pipeline rank 1: F1 is missing\n");
  }
  SUBCASE("too few or too many forwards: one message per rank, before any per-unit check") {
    const auto s = two_stage({F(0), BW(0)}, {F(0), F(1), F(2), BW(0), BW(1)}, 1000000);
    CHECK(joined(check_schedule(s)) ==
          "pipeline rank 0 has 1 forward units, expected one per micro-batch and chunk (1000000 x 1 = 1000000)\n"
          "pipeline rank 1 has 3 forward units, expected one per micro-batch and chunk (1000000 x 1 = 1000000)\n");
  }
  SUBCASE("a link delivers in another order than the receiver expects") {
    const auto s = two_stage({F(1), F(0), BW(0), BW(1)}, {F(0), F(1), BW(0), BW(1)}, 2);
    CHECK(joined(check_schedule(s)).find("pipeline rank 1 receives activations from rank 0 in another order") == 0);
  }
  SUBCASE("deadlock: the last rank's backward comes before the forward it waits for upstream") {
    // Rank 0 runs BW0 before sending F1; rank 1 needs F1 before it runs BW0's gradient... in FIFO order:
    // rank 0 waits for the gradient of micro-batch 0, rank 1 waits for F1 first.
    const auto s = two_stage({F(0), BW(0), F(1), BW(1)}, {F(0), F(1), BW(0), BW(1)}, 2);
    CHECK(joined(check_schedule(s)).find("deadlock: pipeline rank 0 waits forever at unit 1 (BW0)") == 0);
  }
}

TEST_CASE("schedules: a custom 1F1B plans exactly as the built-in; splitting B from W sends gradients sooner") {
  TransformerSpec m = fixture_model("gpt3-1.3b");
  m.layers = 8;
  ParallelSpec par;
  par.pp = 4;
  par.dp = 1;
  par.global_batch = 8;
  TrainingSpec train;
  train.dropout = false;
  const ClusterSpec cluster = toy_cluster(1, 4);
  const std::vector<CalibrationProfile> profiles{ideal_profile()};
  const double builtin = iteration_seconds(m, par, train, cluster, profiles, true);
  ParallelSpec custom = par;
  custom.schedule = ScheduleKind::Custom;
  custom.custom_schedule = builtin_schedule(ScheduleKind::OneFOneB, 4, 8, 1);
  CHECK(iteration_seconds(m, custom, train, cluster, profiles, true) == builtin);
  // The same order with each backward split into B then W: the input gradient
  // leaves for the previous stage before the weight gradient is computed.
  for (auto& units : custom.custom_schedule.units) {
    std::vector<ScheduleUnit> split;
    for (const ScheduleUnit& u : units) {
      if (u.kind != UnitKind::Backward) {
        split.push_back(u);
        continue;
      }
      split.push_back(B(u.microbatch));
      split.push_back(W(u.microbatch));
    }
    units = split;
  }
  REQUIRE(joined(check_schedule(custom.custom_schedule)).empty());
  const double split = iteration_seconds(m, custom, train, cluster, profiles, true);
  CHECK(split < 0.97 * builtin);
  // Same work: model FLOPs do not depend on the schedule.
  const Cluster c(cluster);
  CHECK(plan_training(m, custom, train, c, PlanOptions{}).model_flops ==
        doctest::Approx(plan_training(m, par, train, c, PlanOptions{}).model_flops).epsilon(1e-12));
  // Deferring every W of the first stage to the end keeps its weight-gradient
  // inputs alive longer: with B/W split, stage 0 peaks after F7 with 4 chunks'
  // activations plus the W inputs of the 4 micro-batches whose B ran (1F1B: 4 chunks).
  auto& s0 = custom.custom_schedule.units[0];
  std::vector<ScheduleUnit> deferred;
  for (const ScheduleUnit& u : s0)
    if (u.kind != UnitKind::BackwardWeight) deferred.push_back(u);
  for (int mb = 0; mb < 8; ++mb) deferred.push_back(W(mb));
  s0 = deferred;
  REQUIRE(joined(check_schedule(custom.custom_schedule)).empty());
  const double w_inputs = layer_weight_input_bytes(m, par, train) * 2;  // 2 layers on stage 0
  REQUIRE(w_inputs > 0);
  CHECK(stage_memory(m, custom, train, 0).activations ==
        doctest::Approx(stage_memory(m, par, train, 0).activations + 4 * w_inputs).epsilon(1e-12));
  CHECK(stage_memory(m, custom, train, 1).activations == stage_memory(m, par, train, 1).activations);
  // Under full recomputation B re-creates the weight-gradient inputs from the
  // checkpoint: deferring W keeps them alive, and costs memory there too.
  ParallelSpec full = par, custom_full = custom;
  full.recompute = custom_full.recompute = Recompute::Full;
  CHECK(stage_memory(m, custom_full, train, 0).activations >
        stage_memory(m, full, train, 0).activations + 3 * w_inputs);
}

TEST_CASE("schedules: a V-shaped chunk map runs both chunks of the turn on one rank without a transfer") {
  TransformerSpec m = fixture_model("gpt3-1.3b");
  m.layers = 8;
  ParallelSpec par;
  par.pp = 2;
  par.global_batch = 4;
  par.schedule = ScheduleKind::Custom;
  PipelineSchedule& s = par.custom_schedule;
  s.stages = 2;
  s.microbatches = 4;
  s.chunk_stage = {0, 1, 1, 0};  // rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
  // Rank 0: forward of chunk 0 (its local chunk 0), later chunk 3 (local 1), backward in reverse.
  for (int mb = 0; mb < 4; ++mb) s.units.resize(2);
  for (int mb = 0; mb < 4; ++mb) {
    s.units[0].push_back(F(mb, 0));
    s.units[1].push_back(F(mb, 0));
    s.units[1].push_back(F(mb, 1));
  }
  for (int mb = 0; mb < 4; ++mb) {
    s.units[0].push_back(F(mb, 1));
    s.units[0].push_back(BW(mb, 1));
  }
  for (int mb = 0; mb < 4; ++mb) {
    s.units[1].push_back(BW(mb, 1));
    s.units[1].push_back(BW(mb, 0));
  }
  for (int mb = 0; mb < 4; ++mb) s.units[0].push_back(BW(mb, 0));
  REQUIRE(joined(check_schedule(s)).empty());
  TrainingSpec train;
  const Cluster cluster(toy_cluster(1, 2));
  const TrainingPlan plan = plan_training(m, par, train, cluster, PlanOptions{});
  // Rank 1 turns chunk 1 into chunk 2 locally: it only talks to rank 0 (two links, one per direction and role).
  int pipeline_comms = 0;
  for (const Communicator& c : plan.setup.comms)
    if (c.name.rfind("pipeline link", 0) == 0) ++pipeline_comms;
  CHECK(pipeline_comms == 4);  // 0->1 and 1->0 for activations and for gradients
  CHECK(plan.stages[0].layers == 4);
  CHECK(plan.stages[1].layers == 4);
  const std::vector<CalibrationProfile> profiles{ideal_profile()};
  CHECK(iteration_seconds(m, par, train, cluster.spec(), profiles, true) > 0);
}

TEST_CASE("placement: an order string or an explicit list maps ranks to GPUs; bad ones are named") {
  ParallelSpec par;
  par.tp = 2;
  par.pp = 2;
  par.dp = 2;
  const Placement megatron(par);
  CHECK(megatron.gpu(RankCoord{1, 0, 0, 0, 0}) == 1);
  CHECK(megatron.gpu(RankCoord{0, 0, 0, 1, 0}) == 2);
  CHECK(megatron.gpu(RankCoord{0, 0, 0, 0, 1}) == 4);
  for (int s = 0; s < 2; ++s)
    for (int d = 0; d < 2; ++d)
      for (int t = 0; t < 2; ++t) CHECK(megatron.gpu(RankCoord{t, 0, 0, d, s}) == rank_gpu(par, s, d, 0, t));
  const Placement dp_inner(par, "dp-tp-cp-ep-pp");
  CHECK(dp_inner.gpu(RankCoord{0, 0, 0, 1, 0}) == 1);
  CHECK(dp_inner.gpu(RankCoord{1, 0, 0, 0, 0}) == 2);
  const Placement listed(par, "tp-cp-ep-dp-pp", {7, 6, 5, 4, 3, 2, 1, 0});
  CHECK(listed.gpu(RankCoord{0, 0, 0, 0, 0}) == 7);
  CHECK(listed.gpu(RankCoord{1, 0, 0, 1, 1}) == 0);
  CHECK(joined(Placement::check(par, "tp-dp-pp", {}, 8)) ==
        "order \"tp-dp-pp\": expected all five dimensions tp, cp, ep, dp, pp joined by '-', innermost first (e.g. "
        "\"tp-cp-ep-dp-pp\")\n");
  CHECK(joined(Placement::check(par, "tp-cp-xp-dp-pp", {}, 8)) ==
        "order \"tp-cp-xp-dp-pp\": \"xp\" is not a parallel dimension (expected tp, cp, ep, dp, pp)\n");
  CHECK(joined(Placement::check(par, "tp-cp-ep-dp-pp", {0, 1, 2, 3, 4, 5, 6, 6}, 8)) ==
        "ranks 6 and 7 are both placed on GPU 6\n");
  CHECK(joined(Placement::check(par, "tp-cp-ep-dp-pp", {0, 1, 2}, 8)) == "lists 3 GPUs, expected one per rank (8)\n");
}

TEST_CASE("equivalence classes: replicas on different GPU types are simulated once each, exactly") {
  // Two nodes of 4 GPUs: node 0 fast, node 1 half as fast. DP 2 puts one replica on each node
  // (tp 2, pp 2 inside a node); the slow replica sets the pace at the DP all-reduce.
  ClusterSpec spec = toy_cluster(1, 4);
  NodeGroup slow = spec.groups[0];
  slow.node.gpu.name = "toy-slow";
  slow.node.gpu.peak_flops[static_cast<std::size_t>(Dtype::BF16)] = 50e12;
  spec.groups.push_back(slow);
  CalibrationProfile p_slow = ideal_profile();
  p_slow.gpu = "toy-slow";
  const std::vector<CalibrationProfile> profiles{ideal_profile(), p_slow};
  TransformerSpec m = fixture_model("gpt3-1.3b");
  m.layers = 4;
  ParallelSpec par;
  par.tp = 2;
  par.pp = 2;
  par.dp = 2;
  par.global_batch = 8;
  par.placement_order = "tp-cp-ep-pp-dp";  // the replica is outermost: one per node
  TrainingSpec train;
  int reps = 0, all = 0;
  const double t_reps = iteration_seconds(m, par, train, spec, profiles, true, &reps);
  const double t_all = iteration_seconds(m, par, train, spec, profiles, false, &all);
  CHECK(all == 8);
  CHECK(reps == 4);  // one rank per (stage, replica): the replicas differ in GPU type
  CHECK(t_reps == t_all);
  // The slow replica sets the pace: the same job on two fast nodes is faster.
  ClusterSpec fast = toy_cluster(2, 4);
  int fast_reps = 0;
  const double t_fast = iteration_seconds(m, par, train, fast, {ideal_profile()}, true, &fast_reps);
  CHECK(fast_reps == 2);  // one rank per stage
  CHECK(t_fast < 0.8 * t_reps);
  // Mixing types inside a TP group (tp outermost: each TP pair spans both nodes):
  // every rank of a replica runs, and the two replicas (alike) stand for each other.
  par.placement_order = "pp-dp-cp-ep-tp";
  int mixed = 0;
  const double t_mixed = iteration_seconds(m, par, train, spec, profiles, true, &mixed);
  CHECK(mixed == 4);
  CHECK(t_mixed == iteration_seconds(m, par, train, spec, profiles, false));
}

TEST_CASE("schedules: links to different peers never block each other; a chunk without layers passes through") {
  TransformerSpec m = fixture_model("gpt3-1.3b");
  m.layers = 10;
  ParallelSpec par;
  par.pp = 3;
  par.global_batch = 2;
  par.schedule = ScheduleKind::Custom;
  PipelineSchedule& s = par.custom_schedule;
  s.stages = 3;
  s.microbatches = 2;
  // Rank 0 holds chunks 0 and 2, rank 1 chunks 1 and 4, rank 2 chunk 3: rank 0
  // sends to rank 1 and to rank 2, and rank 1 receives from ranks 0 and 2.
  s.chunk_stage = {0, 1, 0, 2, 1};
  s.units = {{F(0), F(1), F(0, 1), F(1, 1), BW(0, 1), BW(1, 1), BW(0), BW(1)},
             {F(0), F(0, 1), F(1), F(1, 1), BW(0, 1), BW(1, 1), BW(0), BW(1)},
             {F(0), F(1), BW(0), BW(1)}};
  REQUIRE(joined(check_schedule(s)).empty());
  TrainingSpec train;
  const std::vector<CalibrationProfile> profiles{ideal_profile()};
  const ClusterSpec cluster = toy_cluster(1, 3);
  const double t = iteration_seconds(m, par, train, cluster, profiles, false);  // REQUIREs completion
  CHECK(t > 0);
  // The middle chunk of rank 0 without layers: the planner hands activations and gradients through it.
  par.stage_layers = {4, 2, 0, 2, 2};  // rank 0: 4 layers, rank 1: 4, rank 2: 2 (as the even split)
  const double t_empty = iteration_seconds(m, par, train, cluster, profiles, false);
  CHECK(t_empty > 0);
  CHECK(t_empty == doctest::Approx(t).epsilon(0.2));
}

TEST_CASE("schedules: a rank talking over more links than it has streams for is refused by name") {
  // Chunks alternate between rank 0 and ranks 1..39: rank 0 exchanges
  // activations and gradients with each of 39 peers in both directions: 77
  // chunk boundaries, each a forward and a backward link (154).
  PipelineSchedule s;
  s.stages = 40;
  s.microbatches = 1;
  for (int k = 1; k < 40; ++k) {
    s.chunk_stage.push_back(0);
    s.chunk_stage.push_back(k);
  }
  s.units.resize(40);
  for (int c = 0; c < 39; ++c) s.units[0].push_back(F(0, c));
  for (int c = 38; c >= 0; --c) s.units[0].push_back(BW(0, c));
  for (int k = 1; k < 40; ++k) s.units[k] = {F(0), BW(0)};
  CHECK(joined(check_schedule(s)) ==
        "pipeline rank 0 exchanges messages over 154 links (peers x direction), at most 64 are supported\n");
}
