#include <doctest/doctest.h>
#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "model_fixtures.hpp"
#include "models/layer_steps.hpp"
#include "models/memory_model.hpp"
#include "models/planner.hpp"
#include "models/schedule.hpp"
#include "sim/executor.hpp"
#include "sim/metrics.hpp"
#include "sim_fixtures.hpp"

using namespace trainsim;
using namespace trainsim::testing;

TEST_CASE("model FLOPs of every GPT-3 size equal the Megatron-LM formula") {
  int checked = 0;
  for (const TransformerSpec& m : gpt3_models()) {
    for (int tp : {1, 2}) {
      CAPTURE(m.name);
      CAPTURE(tp);
      ParallelSpec par;
      par.tp = tp;
      par.pp = 2;
      par.global_batch = 4;
      TrainingSpec train;
      train.seq_len = 2048;
      const Cluster cluster(toy_cluster(1, 2 * tp));
      const TrainingPlan plan = plan_training(m, par, train, cluster, PlanOptions{});
      // Narayanan et al. 2021 eq. 3 without recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
      const double B = par.global_batch, s = train.seq_len, l = m.layers, h = m.hidden, V = m.vocab;
      const double megatron = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
      CHECK(plan.model_flops == doctest::Approx(megatron).epsilon(1e-9));
      CHECK(model_flops_per_iteration(m, train, par.global_batch) == doctest::Approx(megatron).epsilon(1e-9));
      // Without recomputation hardware FLOPs equal model FLOPs.
      CHECK(plan.hardware_flops == doctest::Approx(plan.model_flops).epsilon(1e-9));
      ++checked;
    }
  }
  CHECK(checked >= 10);
}

TEST_CASE("full recomputation adds one forward: hardware FLOPs = 4/3 model FLOPs") {
  const TransformerSpec m = fixture_model("gpt3-1.3b");
  ParallelSpec par;
  par.recompute = Recompute::Full;
  par.global_batch = 2;
  TrainingSpec train;
  const Cluster cluster(toy_cluster(1, 1));
  const TrainingPlan plan = plan_training(m, par, train, cluster, PlanOptions{});
  // The LM head is not recomputed: 4/3 holds for the layers only (Megatron's 96 vs 72 with V/16 vs V/12).
  const double B = 2, s = train.seq_len, l = m.layers, h = m.hidden, V = m.vocab;
  CHECK(plan.hardware_flops ==
        doctest::Approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))).epsilon(1e-9));
}

TEST_CASE("activation memory: full < selective <= none; SP divides by tp; ZeRO shards the optimizer") {
  const TransformerSpec m = fixture_model("gpt3-175b");
  ParallelSpec par;
  par.tp = 8;
  par.pp = 8;
  par.dp = 4;
  par.global_batch = 64;
  TrainingSpec train;
  train.attention = AttentionKind::Unfused;
  par.recompute = Recompute::None;
  const double none = layer_activation_bytes(m, par, train);
  par.recompute = Recompute::Selective;
  const double selective = layer_activation_bytes(m, par, train);
  par.recompute = Recompute::Full;
  const double full = layer_activation_bytes(m, par, train);
  CHECK(full < selective);
  CHECK(selective < none);
  // Korthikanti et al. 2022 eq. (TP, no SP, no recompute): sbh (10 + 24/t + 5as/(ht)).
  const double s = 2048, b = 1, h = m.hidden, a = m.heads, t = 8;
  CHECK(none == doctest::Approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t))));
  par.recompute = Recompute::Selective;
  par.sequence_parallel = true;
  CHECK(layer_activation_bytes(m, par, train) == doctest::Approx(s * b * h * 34 / t));
  par.zero = 0;
  const double opt0 = stage_memory(m, par, train, 0).optimizer;
  par.zero = 1;
  CHECK(stage_memory(m, par, train, 0).optimizer == doctest::Approx(opt0 / 4));
}

TEST_CASE("simulating one rank per stage equals simulating every rank") {
  const TransformerSpec m = fixture_model("llama3-8b");
  struct Config {
    const char* name;
    int tp, pp, dp, cp, vpp, zero;
    bool sp, overlap, tp_overlap;
    Recompute rc;
  };
  const Config configs[] = {
      {"tp2 pp2 dp2 sp zero1", 2, 2, 2, 1, 1, 1, true, true, false, Recompute::None},
      {"interleaved vpp2 full recompute", 2, 2, 2, 1, 2, 0, false, false, false, Recompute::Full},
      {"zero3 dp8", 1, 1, 8, 1, 1, 3, false, true, false, Recompute::None},
      {"cp2 tp2 pp2 tp overlap", 2, 2, 1, 2, 1, 1, true, true, true, Recompute::Selective},
  };
  for (const Config& c : configs) {
    CAPTURE(c.name);
    ParallelSpec par;
    par.tp = c.tp;
    par.pp = c.pp;
    par.dp = c.dp;
    par.cp = c.cp;
    par.vpp = c.vpp;
    par.schedule = c.vpp > 1 ? ScheduleKind::Interleaved1F1B : ScheduleKind::OneFOneB;
    par.zero = c.zero;
    par.sequence_parallel = c.sp;
    par.dp_overlap = c.overlap;
    par.tp_comm_overlap = c.tp_overlap;
    par.recompute = c.rc;
    par.global_batch = 4 * c.dp;
    TrainingSpec train;
    train.seq_len = 1024;
    const Cluster cluster(toy_cluster(2, 4));
    const std::vector<CalibrationProfile> profiles{ideal_profile(1e-6, 5e-6)};
    const ComputeCostModel costs(cluster, profiles);
    const AnalyticalNetwork net(cluster, profiles);
    PlanOptions reps, all;
    all.representatives = false;
    const TrainingPlan p1 = plan_training(m, par, train, cluster, reps);
    const TrainingPlan p2 = plan_training(m, par, train, cluster, all);
    CHECK(p1.setup.ranks.size() == static_cast<std::size_t>(c.pp));
    CHECK(p2.setup.ranks.size() == 8);
    Executor e1(p1.setup, cluster, costs, net);
    Executor e2(p2.setup, cluster, costs, net);
    const SimulationResult r1 = e1.run();
    const SimulationResult r2 = e2.run();
    REQUIRE(r1.completed);
    REQUIRE(r2.completed);  // every collective and p2p matched across all ranks
    CHECK(r1.makespan == r2.makespan);
    CHECK(p1.model_flops == doctest::Approx(p2.model_flops));
  }
}

TEST_CASE("blocking pipeline transfers cost time but never deadlock") {
  const TransformerSpec m = fixture_model("gpt3-1.3b");
  const Cluster cluster(toy_cluster(4, 2));  // every stage on its own node: p2p over the NICs
  const std::vector<CalibrationProfile> profiles{ideal_profile(1e-6, 5e-6)};
  const ComputeCostModel costs(cluster, profiles);
  const AnalyticalNetwork net(cluster, profiles);
  for (int vpp : {1, 2}) {
    CAPTURE(vpp);
    ParallelSpec par;
    par.tp = 2;
    par.pp = 4;
    par.vpp = vpp;
    par.schedule = vpp > 1 ? ScheduleKind::Interleaved1F1B : ScheduleKind::OneFOneB;
    par.global_batch = 8;
    TrainingSpec train;
    auto run = [&](bool overlap, bool scatter) {
      par.pp_overlap = overlap;
      par.pp_scatter_gather = scatter;
      PlanOptions all;
      all.representatives = false;
      const TrainingPlan p = plan_training(m, par, train, cluster, all);
      Executor e(p.setup, cluster, costs, net);
      const SimulationResult r = e.run();
      REQUIRE(r.completed);
      return r.makespan.to_seconds();
    };
    const double overlapped = run(true, true);
    const double blocking = run(false, true);
    const double whole = run(false, false);
    CHECK(blocking > overlapped);
    CHECK(whole > blocking);  // every TP rank sends the whole activation: tp times the bytes
  }
}

TEST_CASE(
    "Megatron-LM's overlapped interleaved transfers: a receive goes out with the previous send of its direction") {
  // forward_backward_pipelining_with_interleaving with overlap_p2p_comm posts the
  // receive of the next forward's input with the send of this forward's output,
  // right after this forward, and waits on both before the next forward (likewise
  // for backwards). 1F1B posts its receives ahead; interleaved 1F1B without
  // overlap exchanges in batches (the next test).
  const TransformerSpec m = fixture_model("gpt3-1.3b");
  const Cluster cluster(toy_cluster(1, 4));
  ParallelSpec par;
  par.pp = 4;
  par.global_batch = 8;
  TrainingSpec train;
  auto program_of_stage_1 = [&](ScheduleKind k, int vpp, bool overlap) {
    par.schedule = k;
    par.vpp = vpp;
    par.pp_overlap = overlap;
    PlanOptions all;
    all.representatives = false;
    const TrainingPlan p = plan_training(m, par, train, cluster, all);
    return p.setup.programs[p.setup.ranks[1].program];
  };
  // Receives posted after a task, and sends some compute task waits for.
  auto counts = [](const ProgramTemplate& p) {
    int posted_after = 0, matched = 0, waited_sends = 0, recvs = 0;
    std::vector<std::uint32_t> sends;
    for (std::uint32_t t = 0; t < p.tasks.size(); ++t) {
      if (p.tasks[t].kind == TaskKind::Send) {
        sends.push_back(t);
        for (std::uint32_t s : p.succs_of(t)) {
          if (p.tasks[s].kind == TaskKind::Compute) {
            ++waited_sends;
            break;
          }
        }
      }
      if (p.tasks[t].kind != TaskKind::Recv) continue;
      ++recvs;
      const auto deps = p.deps_of(t);
      if (deps.empty()) continue;
      ++posted_after;
      REQUIRE(deps.size() == 1);
      CHECK(p.tasks[deps[0]].kind == TaskKind::Compute);
      const bool forward = p.labels[p.tasks[t].label].front() == 'F';
      // With a send of the same direction that leaves after the same task (the rank's previous unit).
      for (std::uint32_t s : sends) {
        const auto sd = p.deps_of(s);
        if (p.labels[p.tasks[s].label].front() == (forward ? 'F' : 'B') && sd.size() == 1 && sd[0] == deps[0]) {
          ++matched;
          break;
        }
      }
    }
    return std::array<int, 4>{recvs, posted_after, matched, waited_sends};
  };
  const auto megatron = counts(program_of_stage_1(ScheduleKind::Interleaved1F1B, 2, true));
  // 16 forward and 16 backward receives; the first forward's is posted ahead, and the
  // first backward's goes with the last warm-up forward's send.
  CHECK(megatron[0] == 32);
  CHECK(megatron[1] == 31);
  CHECK(megatron[2] == 30);
  CHECK(megatron[3] == 30);  // each send but the last of its direction holds the next unit
  const auto other = counts(program_of_stage_1(ScheduleKind::OneFOneB, 1, true));
  CHECK(other[0] > 0);
  CHECK(other[1] == 0);
}

TEST_CASE("Megatron-LM's interleaved transfers without overlap: one batched, blocking exchange per step") {
  // forward_backward_pipelining_with_interleaving without overlap_p2p_comm
  // exchanges after each warm-up forward, after each steady (forward, backward)
  // pair (the forward's output leaves after the backward) and after each
  // cool-down backward; the next unit waits for every send and receive of it.
  // Stage 1 of pp 4, vpp 2, 8 micro-batches: 8 warm-up forwards, 8 steady pairs,
  // 8 cool-down backwards.
  const TransformerSpec m = fixture_model("gpt3-1.3b");
  const Cluster cluster(toy_cluster(1, 4));
  ParallelSpec par;
  par.pp = 4;
  par.vpp = 2;
  par.global_batch = 8;
  par.schedule = ScheduleKind::Interleaved1F1B;
  par.pp_overlap = false;
  PlanOptions all;
  all.representatives = false;
  const TrainingPlan plan = plan_training(m, par, TrainingSpec{}, cluster, all);
  const ProgramTemplate& p = plan.setup.programs[plan.setup.ranks[1].program];
  const auto per_stage = megatron_batched_exchanges(4, 1, 2, 8);
  CHECK(std::count_if(per_stage.begin(), per_stage.end(), [](const BatchedExchange& e) { return e.after; }) == 24);
  int recvs = 0, ahead = 0, sends = 0, waited = 0, forward_after_backward = 0;
  std::set<std::uint32_t> posts;  // the tasks after which transfers are posted: one per exchange
  for (std::uint32_t t = 0; t < p.tasks.size(); ++t) {
    const TaskKind k = p.tasks[t].kind;
    if (k != TaskKind::Send && k != TaskKind::Recv) continue;
    const auto deps = p.deps_of(t);
    if (deps.empty()) {
      ++ahead;
    } else {
      REQUIRE(deps.size() == 1);
      posts.insert(deps[0]);
      if (k == TaskKind::Send && p.labels[p.tasks[t].label].front() == 'F' &&
          p.labels[p.tasks[deps[0]].label].front() == 'B')
        ++forward_after_backward;
    }
    (k == TaskKind::Send ? sends : recvs) += 1;
    for (std::uint32_t s : p.succs_of(t)) {
      if (p.tasks[s].kind == TaskKind::Compute) {
        ++waited;
        break;
      }
    }
  }
  CHECK(recvs == 32);  // 16 forward inputs from stage 0, 16 backward inputs from stage 2
  CHECK(ahead == 1);   // the first forward's input, before the loop
  CHECK(sends == 32);
  CHECK(posts.size() == 24);
  CHECK(forward_after_backward == 8);
  CHECK(waited == recvs + sends);  // the last exchange holds the optimizer step
  // Megatron-LM's recv_prev and recv_next ask for every input that comes from
  // another rank, the first rank's wrap-around inputs from the last included.
  for (const std::array<int, 3>& c :
       {std::array<int, 3>{4, 2, 8}, std::array<int, 3>{4, 3, 12}, std::array<int, 3>{4, 2, 4},
        std::array<int, 3>{8, 3, 24}, std::array<int, 3>{3, 2, 6}}) {
    const int pp = c[0], vpp = c[1], mb = c[2];
    for (int stage = 0; stage < pp; ++stage) {
      CAPTURE(pp);
      CAPTURE(vpp);
      CAPTURE(mb);
      CAPTURE(stage);
      int fwd = stage == 0 ? 0 : 1, bwd = 0;
      for (const BatchedExchange& e : megatron_batched_exchanges(pp, stage, vpp, mb)) {
        fwd += e.recv_forward;
        bwd += e.recv_backward;
      }
      CHECK(fwd == (stage == 0 ? mb * (vpp - 1) : mb * vpp));
      CHECK(bwd == (stage == pp - 1 ? mb * (vpp - 1) : mb * vpp));
    }
  }
}

TEST_CASE("Megatron-LM's overlapped interleaved transfers: one stream per peer, in the order posted") {
  // With overlap_p2p_comm each send and receive is its own torch.distributed
  // isend/irecv, which ProcessGroupNCCL runs on the stream of the two ranks'
  // communicator: a rank's messages with one peer, both directions, queue in
  // the order the schedule posts them (a receive with the send before it).
  const TransformerSpec m = fixture_model("gpt3-1.3b");
  const Cluster cluster(toy_cluster(1, 4));
  const std::vector<CalibrationProfile> profiles{ideal_profile(1e-6, 5e-6)};
  const ComputeCostModel costs(cluster, profiles);
  const AnalyticalNetwork net(cluster, profiles);
  ParallelSpec par;
  par.pp = 4;
  par.vpp = 2;
  par.schedule = ScheduleKind::Interleaved1F1B;
  par.global_batch = 8;
  TrainingSpec train;
  PlanOptions all;
  all.representatives = false;
  const TrainingPlan plan = plan_training(m, par, train, cluster, all);
  const ProgramTemplate& p = plan.setup.programs[plan.setup.ranks[1].program];
  // stream -> {sends, receives, forward, backward, post points in queue order}
  std::map<std::uint32_t, std::array<int, 4>> kinds;
  std::map<std::uint32_t, std::vector<std::int64_t>> posts;
  for (std::uint32_t t = 0; t < p.tasks.size(); ++t) {
    const Task& task = p.tasks[t];
    if (task.kind != TaskKind::Send && task.kind != TaskKind::Recv) continue;
    auto& k = kinds[task.stream];
    ++k[task.kind == TaskKind::Send ? 0 : 1];
    ++k[p.labels[task.label].front() == 'F' ? 2 : 3];
    const auto deps = p.deps_of(t);
    posts[task.stream].push_back(deps.empty() ? -1 : static_cast<std::int64_t>(deps[0]));
  }
  REQUIRE(kinds.size() == 2);  // stage 0 and stage 2
  for (const auto& entry : kinds) {
    const std::uint32_t stream = entry.first;
    const std::array<int, 4>& k = entry.second;
    CAPTURE(p.streams[stream]);
    CHECK(k[0] == 16);  // the forwards' sends to stage 2, or the backwards' to stage 0
    CHECK(k[1] == 16);
    CHECK(k[2] == 16);
    CHECK(k[3] == 16);
    CHECK(std::is_sorted(posts[stream].begin(), posts[stream].end()));
  }
  Executor e(plan.setup, cluster, costs, net);
  CHECK(e.run().completed);  // posted out of order, the two ends' queues would deadlock
}

TEST_CASE("tied embeddings: the first and last stage all-reduce the shared weight's gradient") {
  // Megatron-LM's finalize_model_grads (_allreduce_word_embedding_grads) after the
  // DP gradient sync, DeepSpeed's ReduceTiedGrads before its DP all-reduce: one
  // all-reduce of vocab/tp x hidden gradient elements between each rank of the
  // first stage and its peer (same DP, CP, TP index) on the last stage.
  TransformerSpec m = fixture_model("gpt3-1.3b");
  const Cluster cluster(toy_cluster(2, 8));
  ParallelSpec par;
  par.tp = 2;
  par.pp = 4;
  par.dp = 2;
  par.global_batch = 16;
  par.dp_overlap = false;
  TrainingSpec train;
  struct TiedTask {
    int stage;
    std::uint64_t bytes;
    std::vector<int> members;
    bool before_step = false, before_dp = false, after_dp = false;
  };
  auto tied_tasks = [&]() {
    PlanOptions all;
    all.representatives = false;
    const TrainingPlan p = plan_training(m, par, train, cluster, all);
    std::vector<TiedTask> out;
    for (std::size_t r = 0; r < p.setup.ranks.size(); ++r) {
      const RankProgram& rank = p.setup.ranks[r];
      const ProgramTemplate& prog = p.setup.programs[rank.program];
      for (std::uint32_t t = 0; t < prog.tasks.size(); ++t) {
        if (prog.labels[prog.tasks[t].label] != "pp.ar.tied_grads") continue;
        TiedTask tt{p.stage_of_rank[r], prog.tasks[t].bytes,
                    p.setup.comms[rank.comm_of_slot[prog.tasks[t].ref]].members};
        CHECK(prog.tasks[t].collective == CollectiveKind::AllReduce);
        for (std::uint32_t s : prog.succs_of(t)) {
          tt.before_step = tt.before_step || prog.labels[prog.tasks[s].label] == "optimizer.grad_norm";
          tt.before_dp = tt.before_dp || prog.labels[prog.tasks[s].label] == "dp.ar.grads";
        }
        for (std::uint32_t d : prog.deps_of(t))
          tt.after_dp = tt.after_dp || prog.labels[prog.tasks[d].label] == "dp.ar.grads";
        CHECK(std::find(tt.members.begin(), tt.members.end(), rank.gpu) != tt.members.end());
        out.push_back(tt);
      }
    }
    return out;
  };
  // Megatron-LM: every rank of stages 0 and 3 (2 TP x 2 DP each), after its DP sync, before the step.
  std::vector<TiedTask> tied = tied_tasks();
  REQUIRE(tied.size() == 8);
  std::map<std::vector<int>, int> groups;
  for (const TiedTask& t : tied) {
    CHECK((t.stage == 0 || t.stage == 3));
    CHECK(t.bytes == task_bytes(51200.0 * 2048 / 2 * 4));  // fp32 gradients of a 1/tp vocabulary shard
    CHECK(t.members.size() == 2);
    CHECK(t.before_step);
    CHECK(t.after_dp);
    CHECK_FALSE(t.before_dp);
    ++groups[t.members];
  }
  CHECK(groups.size() == 4);  // one group per (dp, tp) pair, each a first- and a last-stage rank
  for (const auto& [members, n] : groups) CHECK(n == 2);
  // DeepSpeed: before the DP all-reduce.
  train.tied_grad_sync = TiedGradSync::BeforeDp;
  tied = tied_tasks();
  REQUIRE(tied.size() == 8);
  for (const TiedTask& t : tied) {
    CHECK(t.before_dp);
    CHECK_FALSE(t.after_dp);
  }
  // Nothing to reduce: not run (the Zero Bubble fork's 1F1B), untied weights, one
  // stage, or both ends on one rank (ZB-V's V placement).
  train.tied_grad_sync = TiedGradSync::None;
  CHECK(tied_tasks().empty());
  train.tied_grad_sync = TiedGradSync::AfterDp;
  m.tied_embeddings = false;
  CHECK(tied_tasks().empty());
  m.tied_embeddings = true;
  par.pp = 1;
  par.dp = 8;
  par.global_batch = 64;
  CHECK(tied_tasks().empty());
  par.pp = 4;
  par.dp = 2;
  par.global_batch = 16;
  par.schedule = ScheduleKind::ZeroBubbleV;
  CHECK(tied_tasks().empty());
}

TEST_CASE("a tied output weight is one tensor on the embedding's chunk, a second copy on another chunk") {
  TransformerSpec m = fixture_model("gpt3-1.3b");
  REQUIRE(m.tied_embeddings);
  TrainingSpec train;
  ParallelSpec par;
  par.pp = 1;
  par.dp = 8;
  par.global_batch = 64;
  const double head = static_cast<double>(m.vocab) * m.hidden;
  auto weights = [&](bool tied) {
    m.tied_embeddings = tied;
    return stage_memory(m, par, train, 0).weights;
  };
  const double bytes = activation_element_bytes(train);
  // One stage: the head is the embedding's tensor.
  CHECK(weights(false) - weights(true) == doctest::Approx(head * bytes));
  // ZB-V: rank 0 holds the first chunk (the embedding) and the last (the head), two model
  // chunks with a weight each, tied or not.
  par.pp = 4;
  par.dp = 2;
  par.global_batch = 16;
  par.schedule = ScheduleKind::ZeroBubbleV;
  CHECK(weights(true) == doctest::Approx(weights(false)));
}

TEST_CASE("a learned position table is replicated over TP, the word embedding split") {
  TransformerSpec m = fixture_model("gpt3-1.3b");
  REQUIRE_FALSE(m.rope);
  REQUIRE_FALSE(m.alibi);
  const double words = static_cast<double>(m.vocab) * m.hidden;
  const double positions = static_cast<double>(m.max_seq_len) * m.hidden;
  CHECK(m.embedding_params_per_tp_rank(4) == doctest::Approx(words / 4 + positions));
  TrainingSpec train;
  ParallelSpec par;
  par.pp = 2;
  par.dp = 2;
  par.global_batch = 16;
  // The first stage minus the second: the embedding (stage 0's layers are stage 1's), whole
  // positions on every TP rank.
  auto embedding_bytes = [&](int tp) {
    par.tp = tp;
    return stage_memory(m, par, train, 0).weights - stage_memory(m, par, train, 1).weights +
           words / tp * activation_element_bytes(train);  // the last stage's untied head copy
  };
  REQUIRE(m.tied_embeddings);
  const double bytes = activation_element_bytes(train);
  CHECK(embedding_bytes(1) == doctest::Approx((words + positions) * bytes));
  CHECK(embedding_bytes(4) == doctest::Approx((words / 4 + positions) * bytes));
}

TEST_CASE("a layer's norms and row-parallel biases are whole on every TP rank") {
  // Megatron-LM splits the QKV, output and MLP weights and the column-parallel biases over TP;
  // the two LayerNorms and the biases of the row-parallel output and down projections, added
  // after the all-reduce, are replicated.
  TransformerSpec m = fixture_model("gpt3-1.3b");
  REQUIRE(m.bias);
  REQUIRE_FALSE(m.rmsnorm);
  const double h = m.hidden, f = m.ffn_hidden;
  const double weights = 4 * h * h + 2 * h * f, column_biases = 3 * h + f, replicated = 4 * h + 2 * h;
  CHECK(m.params_per_layer() == doctest::Approx(weights + column_biases + replicated));
  CHECK(m.params_per_layer_per_tp_rank(1) == m.params_per_layer());
  CHECK(m.params_per_layer_per_tp_rank(8) == doctest::Approx((weights + column_biases) / 8 + replicated));
  // The same layers without linear-layer biases (Nemotron): the norms alone.
  m.bias = false;
  CHECK(m.params_per_layer() == doctest::Approx(weights + 4 * h));
  CHECK(m.params_per_layer_per_tp_rank(8) == doctest::Approx(weights / 8 + 4 * h));
  // The memory model holds them so.
  m.bias = true;
  TrainingSpec train;
  ParallelSpec par;
  par.tp = 8;
  par.pp = 2;
  par.global_batch = 16;
  par.stage_layers = {m.layers / 2 - 1, m.layers / 2 + 1};
  // Stage 1 holds two layers more and the head's copy of the word embedding; stage 0 that
  // split table and the whole position table.
  const double bytes = activation_element_bytes(train);
  const double positions = static_cast<double>(m.max_seq_len) * m.hidden;
  const double two_layers =
      stage_memory(m, par, train, 1).weights - stage_memory(m, par, train, 0).weights + positions * bytes;
  CHECK(two_layers / 2 == doctest::Approx(((weights + column_biases) / 8 + replicated) * bytes));
}

TEST_CASE("interleaving shrinks the pipeline bubble") {
  const TransformerSpec m = fixture_model("gpt3-1.3b");
  ParallelSpec par;
  par.pp = 4;
  par.global_batch = 8;
  TrainingSpec train;
  const Cluster cluster(toy_cluster(1, 4));
  const std::vector<CalibrationProfile> profiles{ideal_profile(1e-6, 5e-6)};
  const ComputeCostModel costs(cluster, profiles);
  const AnalyticalNetwork net(cluster, profiles);
  auto makespan = [&](ScheduleKind k, int vpp) {
    par.schedule = k;
    par.vpp = vpp;
    const TrainingPlan p = plan_training(m, par, train, cluster, PlanOptions{});
    Executor e(p.setup, cluster, costs, net);
    const SimulationResult r = e.run();
    REQUIRE(r.completed);
    return r.makespan.to_seconds();
  };
  const double gpipe = makespan(ScheduleKind::GPipe, 1);
  const double one = makespan(ScheduleKind::OneFOneB, 1);
  const double inter = makespan(ScheduleKind::Interleaved1F1B, 2);
  CHECK(one == doctest::Approx(gpipe).epsilon(0.02));  // same bubble, different memory
  CHECK(inter < one * 0.95);
}

TEST_CASE("optimizer step bytes per parameter follow the mixed-precision passes") {
  const TransformerSpec m = fixture_model("gpt3-1.3b");
  // Bytes of optimizer.step per parameter (grad_norm reads 4 B per parameter).
  auto per_param = [&](Dtype precision, int grad_bytes, int zero, const std::string& optimizer) {
    ParallelSpec par;
    par.dp = 2;
    par.zero = zero;
    par.global_batch = 2;
    TrainingSpec train;
    train.precision = precision;
    train.grad_reduce_bytes = grad_bytes;
    train.optimizer = optimizer;
    ClusterSpec spec = toy_cluster(1, 2);
    spec.groups[0].node.gpu.peak_flops[static_cast<std::size_t>(precision)] = 100e12;  // the toy GPU supports it
    const Cluster cluster(spec);
    const TrainingPlan plan = plan_training(m, par, train, cluster, PlanOptions{});
    double step = 0, norm = 0;
    for (const ComputeOp& op : plan.setup.programs.at(0).ops) {
      if (op.name == "optimizer.step") step = op.bytes;
      if (op.name == "optimizer.grad_norm") norm = op.bytes;
    }
    REQUIRE(norm > 0);
    return step / (norm / 4);
  };
  // Megatron-LM fp16: grad copy 6 + unscale 8 + Adam 28 + weight copy 6.
  CHECK(per_param(Dtype::FP16, 2, 0, "adam") == doctest::Approx(48));
  // bf16 with fp32 gradient accumulation: Adam 28 + weight copy 6.
  CHECK(per_param(Dtype::BF16, 4, 1, "adam") == doctest::Approx(34));
  // Distributed optimizer with bf16 reduction: + the gradient copy.
  CHECK(per_param(Dtype::BF16, 2, 1, "adam") == doctest::Approx(40));
  // FSDP keeps fp32 shards: no weight copy.
  CHECK(per_param(Dtype::BF16, 4, 3, "adam") == doctest::Approx(28));
  // fp32 training: the update alone; SGD with momentum 20.
  CHECK(per_param(Dtype::FP32, 4, 0, "sgd") == doctest::Approx(20));
}

TEST_CASE("1F1B on a uniform toy model: bubble fraction = (pp-1)/(m+pp-1)") {
  for (int m : {4, 8, 16}) {
    CAPTURE(m);
    TransformerSpec model;
    model.name = "uniform";
    model.layers = 8;
    model.hidden = 1024;
    model.heads = 16;
    model.kv_heads = 16;
    model.ffn_hidden = 4096;
    model.vocab = 8;  // embedding and head negligible: every stage does the same work
    model.rope = true;
    model.rmsnorm = true;
    ParallelSpec par;
    par.pp = 4;
    par.schedule = ScheduleKind::OneFOneB;
    par.global_batch = m;
    TrainingSpec train;
    train.seq_len = 1024;
    ClusterSpec spec = toy_cluster(1, 4);
    spec.groups[0].node.scaleup_bandwidth = 1e18;     // activation transfers take no time
    spec.groups[0].node.gpu.memory_bandwidth = 1e18;  // nor do memory-bound ops (optimizer step)
    const Cluster cluster(spec);
    const std::vector<CalibrationProfile> profiles{ideal_profile()};
    const ComputeCostModel costs(cluster, profiles);
    const AnalyticalNetwork net(cluster, profiles);
    const TrainingPlan plan = plan_training(model, par, train, cluster, PlanOptions{});
    Executor ex(plan.setup, cluster, costs, net);
    const SimulationResult r = ex.run();
    REQUIRE(r.completed);
    const double expected = 3.0 / (m + 3.0);
    for (int s = 0; s < par.pp; ++s) {
      CAPTURE(s);
      const TimeBreakdown b = breakdown(r.timelines[plan.recorded_rank_of_stage[s]].intervals, r.makespan);
      const double bubble = 1.0 - b.compute_s / r.makespan.to_seconds();
      CHECK(bubble == doctest::Approx(expected).epsilon(0.01));
    }
  }
}
