// Mixed fleets and per-stage layouts: clusters of several GPU types at both
// fidelities (and which stage sets the pace), inline GPUs, parallel.stages with
// TP resharding, per-stage DP and micro-batch resharding, per-stage CP resharding, an encoder sub-model, their input
// errors, and the mixed-fleet search against the plans that treat every GPU alike.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/mpmd.hpp"
#include "scenario_fixtures.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/mixed_fleet_ranking.hpp"
#include "tools/frontend/scenario.hpp"
#include "tools/frontend/sweep.hpp"

using namespace trainsim;

namespace {

// Llama-3 8B on 32 H100 (group 0) + 32 A100 (group 1), two pipeline stages.
const char* kMixed = R"({
  "model": "llama3-8b",
  "cluster": {"groups": [{"node": "dgx-h100", "nodes": 4}, {"node": "dgx-a100", "nodes": 4}]},
  "parallel": {"tp": 4, "pp": 2, "dp": 8, "micro_batch": 1, "global_batch": 64},
  "training": {"seq_len": 4096}
})";

Scenario load(const char* text, const std::vector<std::string>& sets = {}) {
  return load_scenario_text(text, "s.json", "", sets, testing::catalog());
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The (sender, receiver) GPU pairs of a two-stage job's pipeline links: activations
// stage 0 -> 1 (not the gradient links) and gradients stage 1 -> 0, as sender -> receiver.
struct LinkPairs {
  std::set<std::pair<int, int>> forward, backward;
};
LinkPairs pipeline_link_pairs(const JobRun& run) {
  LinkPairs out;
  for (const Communicator& c : run.plan.setup.comms) {
    if (contains(c.name, "pipeline link stage 0->1") && !contains(c.name, "(gradients)"))
      out.forward.insert({c.members.at(0), c.members.at(1)});
    if (contains(c.name, "pipeline link stage 1->0")) out.backward.insert({c.members.at(1), c.members.at(0)});
  }
  return out;
}

}  // namespace

TEST_CASE("32 A100 + 32 H100: both fidelities agree and the A100 stage sets the pace") {
  const Scenario s = load(kMixed);
  const JobReport a = simulate(s, Fidelity::Analytical);
  const JobReport f = simulate(s, Fidelity::Flow);
  REQUIRE(a.feasible);
  REQUIRE(f.feasible);
  CHECK(f.iteration_time_s == doctest::Approx(a.iteration_time_s).epsilon(0.02));
  REQUIRE(a.per_stage.size() == 2);
  CHECK(a.per_stage[0].gpus == std::vector<std::string>{"H100-SXM-80GB"});
  CHECK(a.per_stage[1].gpus == std::vector<std::string>{"A100-SXM4-80GB"});
  // The A100 stage computes longer and waits less than the H100 stage.
  CHECK(a.per_stage[1].time.compute_s > 2 * a.per_stage[0].time.compute_s);
  CHECK(a.per_stage[0].time.bubble_s > a.per_stage[1].time.bubble_s);
  CHECK(a.pace_stage == 1);
  CHECK(a.pace_gpu == "A100-SXM4-80GB");
  CHECK(f.pace_gpu == "A100-SXM4-80GB");
  CHECK(contains(summary_text(a), "pace set by stage 1 (A100-SXM4-80GB)"));
  // MFU divides by the peaks of both GPU types.
  const double peak = 32 * 989.4e12 + 32 * 312e12;
  CHECK(a.mfu == doctest::Approx(a.tflops_per_gpu * 1e12 * 64 / peak).epsilon(1e-9));
}

TEST_CASE("parallel.stages with the plain layout gives the plain plan's time; more layers on H100 is faster") {
  const JobReport plain = simulate(load(kMixed));
  const JobReport staged =
      simulate(load(kMixed, {R"(parallel.stages=[{"tp": 4, "layers": 16}, {"tp": 4, "layers": 16}])"}));
  CHECK(staged.iteration_time_s == plain.iteration_time_s);
  const JobReport uneven = simulate(
      load(kMixed, {R"(parallel.stages=[{"group": 0, "tp": 4, "layers": 20}, {"group": 1, "tp": 4, "layers": 12}])"}));
  REQUIRE(uneven.feasible);
  CHECK(uneven.iteration_time_s < 0.9 * plain.iteration_time_s);
  CHECK(uneven.per_stage[0].layers == 20);
}

TEST_CASE("parallel.stages with tied embeddings: the stages' tied-gradient all-reduce is a warning, not silent") {
  // Per-stage layouts do not pair the embedding's and the LM head's ranks (docs/frameworks.md).
  const std::string stages = R"(parallel.stages=[{"tp": 4, "layers": 16}, {"tp": 4, "layers": 16}])";
  const std::string tied = R"(model={"preset": "llama3-8b", "tied_embeddings": true})";
  bool warned = false;
  for (const std::string& w : load(kMixed, {tied, stages}).warnings) warned = warned || contains(w, "tied embedding");
  CHECK(warned);
  CHECK(load(kMixed, {stages}).warnings.empty());
  CHECK(load(kMixed, {tied}).warnings.empty());
}

TEST_CASE("stages of different TP reshard activations, and run at both fidelities") {
  // H100 stage TP 8 x DP 4, A100 stage TP 2 x DP 4 on 8 A100s, 16 A100 idle -> use a smaller cluster.
  const char* text = R"({
    "model": "llama3-8b",
    "cluster": {"groups": [{"node": "dgx-h100", "nodes": 2}, {"node": "dgx-a100", "nodes": 1}]},
    "parallel": {"pp": 2, "dp": 2, "micro_batch": 1, "global_batch": 16, "sequence_parallel": true,
                 "stages": [{"group": 0, "tp": 8, "layers": 22}, {"group": 1, "tp": 4, "layers": 10}]},
    "training": {"seq_len": 4096}
  })";
  const Scenario s = load(text);
  const JobReport a = simulate(s, Fidelity::Analytical);
  const JobReport f = simulate(s, Fidelity::Flow);
  REQUIRE(a.feasible);
  REQUIRE(f.feasible);
  CHECK(f.iteration_time_s == doctest::Approx(a.iteration_time_s).epsilon(0.03));
  // Each H100 rank (TP 8) sends 1/8 of an activation to one A100 rank (TP 4), which gathers two of them.
  const JobRun run = run_job(s);
  int forward = 0, backward = 0;
  for (const Communicator& c : run.plan.setup.comms) {
    forward += contains(c.name, "pipeline link stage 0->1") ? 1 : 0;
    backward += contains(c.name, "pipeline link stage 1->0") ? 1 : 0;
  }
  CHECK(forward == 2 * 8);   // dp 2 x 8 sending H100 ranks, one receiver each
  CHECK(backward == 2 * 8);  // each A100 rank sends gradients back to both of its senders
}

// A toy 2-stage job whose stages differ in DP and micro-batch: stage 0 on a DGX
// H100 with TP 4 x DP 2 at micro-batch 2, stage 1 on a DGX A100 with TP 2 x
// DP 4 at micro-batch 1; each pipeline step carries 4 samples, 16 in all.
const char* kDpReshard = R"({
  "model": "llama3-8b",
  "cluster": {"groups": [{"node": "dgx-h100", "nodes": 1}, {"node": "dgx-a100", "nodes": 1}]},
  "parallel": {"pp": 2, "dp": 2, "micro_batch": 2, "global_batch": 16, "sequence_parallel": true,
               "stages": [{"group": 0, "tp": 4, "layers": 20},
                          {"group": 1, "tp": 2, "dp": 4, "micro_batch": 1, "layers": 12}]},
  "training": {"seq_len": 2048}
})";

TEST_CASE("stages of different DP and micro-batch: each replica sends its samples to the replicas that own them") {
  const Scenario s = load(kDpReshard);
  // Hand count: one sample's activation is 2048 tokens x 4096 hidden x 2 B; a
  // sending replica (2 samples) splits it over the 2 receiving replicas of 1
  // sample each, and each sample over max(TP 4, TP 2) = 4 pieces.
  const double piece = 2048.0 * 4096 * 2 / 4;
  for (const auto& [from, to] : {std::pair{0, 1}, std::pair{1, 0}}) {
    const BoundaryShape shape = boundary_shape(s.model, s.parallel, s.training, from, to);
    CHECK(shape.samples == 1);
    CHECK(shape.bytes == piece);
    // An H100 rank talks to 2 replicas x 1 A100 rank; an A100 rank to 1 replica x 2 H100 ranks.
    CHECK(shape.sends == 2);
    CHECK(shape.recvs == 2);
  }
  const JobRun run = run_job(s);
  // The pairs: H100 rank (replica d, TP t) = GPU 4d + t; A100 rank (replica e, TP u) = GPU 8 + 2e + u;
  // replica d's samples go to replicas 2d and 2d + 1, TP rank t's piece to TP rank t / 2.
  std::set<std::pair<int, int>> expected;
  for (int d = 0; d < 2; ++d) {
    for (int t = 0; t < 4; ++t) {
      for (int e = 2 * d; e < 2 * d + 2; ++e) expected.insert({4 * d + t, 8 + 2 * e + t / 2});
    }
  }
  const LinkPairs links = pipeline_link_pairs(run);
  CHECK(links.forward == expected);
  CHECK(links.backward == expected);
  // Every rank exchanges the samples of each of the 4 pipeline steps, 4 pieces a step each way.
  for (int program = 0; program < 2; ++program) {
    int sends = 0, recvs = 0;
    double bytes = 0;
    for (const Task& task : run.plan.setup.programs.at(program).tasks) {
      if (task.comm_class != CommClass::PP) continue;
      CHECK(task.bytes == static_cast<std::uint64_t>(piece));
      sends += task.kind == TaskKind::Send ? 1 : 0;
      recvs += task.kind == TaskKind::Recv ? 1 : 0;
      bytes += task.kind == TaskKind::Send ? static_cast<double>(task.bytes) : 0;
    }
    CHECK(sends == 4 * 2);
    CHECK(recvs == 4 * 2);
    // An H100 rank sends its 2 samples' quarter per step; an A100 rank its 1 sample's half.
    CHECK(bytes == 4 * (program == 0 ? 2.0 * 2048 * 4096 * 2 / 4 : 1.0 * 2048 * 4096 * 2 / 2));
  }
  // Each stage reduces its gradients over its own replicas.
  int dp2 = 0, dp4 = 0;
  for (const Communicator& c : run.plan.setup.comms) {
    if (!contains(c.name, "dp group")) continue;
    dp2 += contains(c.name, "[stage 0]") && c.members.size() == 2 ? 1 : 0;
    dp4 += contains(c.name, "[stage 1]") && c.members.size() == 4 ? 1 : 0;
  }
  CHECK(dp2 == 4);  // one per H100 TP rank
  CHECK(dp4 == 2);  // one per A100 TP rank
}

TEST_CASE("stages of different DP run at both fidelities, deterministically, and the boundary sets the pp time") {
  const Scenario s = load(kDpReshard);
  const JobReport a = simulate(s, Fidelity::Analytical);
  const JobReport f = simulate(s, Fidelity::Flow);
  REQUIRE(a.feasible);
  REQUIRE(f.feasible);
  CHECK(f.iteration_time_s == doctest::Approx(a.iteration_time_s).epsilon(0.03));
  CHECK(simulate(s, Fidelity::Analytical).iteration_time_s == a.iteration_time_s);
  CHECK(simulate(s, Fidelity::Flow).iteration_time_s == f.iteration_time_s);
  // The boundary crosses the NICs (each stage's DP and TP groups stay inside its node):
  // slower NICs leave more pipeline transfer exposed at both fidelities.
  const Scenario slow =
      load(kDpReshard, {R"(cluster.groups=[{"node": {"preset": "dgx-h100", "nics": {"count": 8, "bandwidth": "10Gbps"}},
                   "nodes": 1}, {"node": {"preset": "dgx-a100", "nics": {"count": 8, "bandwidth": "10Gbps"}},
                   "nodes": 1}])"});
  const auto pp = [](const JobReport& r) {
    double t = 0;
    for (const StageReport& st : r.per_stage) t += st.time.exposed_comm_s[static_cast<std::size_t>(CommClass::PP)];
    return t;
  };
  for (const Fidelity fid : {Fidelity::Analytical, Fidelity::Flow}) {
    const JobReport fast = fid == Fidelity::Analytical ? a : f;
    const JobReport slowed = simulate(slow, fid);
    REQUIRE(slowed.feasible);
    CHECK(pp(fast) > 0);
    CHECK(pp(slowed) > 2 * pp(fast));
    CHECK(slowed.iteration_time_s > fast.iteration_time_s);
  }
}

// A toy 2-stage job whose stages differ in CP and TP: stage 0 on a DGX H100
// with TP 2 x CP 4, stage 1 on a DGX A100 with TP 4 x CP 2, 8192 tokens.
const char* kCpReshard = R"({
  "model": "llama3-8b",
  "cluster": {"groups": [{"node": "dgx-h100", "nodes": 1}, {"node": "dgx-a100", "nodes": 1}]},
  "parallel": {"pp": 2, "dp": 1, "micro_batch": 1, "global_batch": 8, "sequence_parallel": true,
               "stages": [{"group": 0, "tp": 2, "cp": 4, "layers": 20}, {"group": 1, "tp": 4, "cp": 2, "layers": 12}]},
  "training": {"seq_len": 8192}
})";

TEST_CASE("stages of different CP: each CP rank sends its tokens to the CP ranks that own them") {
  const Scenario s = load(kCpReshard);
  // Hand count: a sample's activation is 8192 tokens x 4096 hidden x 2 B, cut into
  // max(CP 4, CP 2) sequence pieces and each into max(TP 2, TP 4) pieces. Under the
  // ring's load-balancing split (rank i holds chunks i and 2cp-1-i) CP rank c of
  // stage 1 holds exactly what CP ranks 2c and 2c+1 of stage 0 hold.
  const double piece = 8192.0 * 4096 * 2 / 4 / 4;
  for (const auto& [from, to] : {std::pair{0, 1}, std::pair{1, 0}}) {
    const BoundaryShape shape = boundary_shape(s.model, s.parallel, s.training, from, to);
    CHECK(shape.bytes == piece);
    // An H100 rank talks to 1 CP rank x 2 A100 TP ranks; an A100 rank to 2 CP ranks x 1 H100 TP rank.
    CHECK(shape.sends == 2);
    CHECK(shape.recvs == 2);
  }
  const JobRun run = run_job(s);
  // H100 rank (CP c, TP t) = GPU 2c + t; A100 rank (CP e, TP u) = GPU 8 + 4e + u: CP
  // rank c's tokens go to CP rank c / 2, TP rank t's piece to TP ranks 2t and 2t + 1.
  std::set<std::pair<int, int>> expected;
  for (int c = 0; c < 4; ++c) {
    for (int t = 0; t < 2; ++t) {
      for (int u = 2 * t; u < 2 * t + 2; ++u) expected.insert({2 * c + t, 8 + 4 * (c / 2) + u});
    }
  }
  int cp4 = 0, cp2 = 0, dp4 = 0, dp2 = 0;
  for (const Communicator& c : run.plan.setup.comms) {
    cp4 += contains(c.name, "cp group [stage 0]") && c.members.size() == 4 ? 1 : 0;
    cp2 += contains(c.name, "cp group [stage 1]") && c.members.size() == 2 ? 1 : 0;
    // Each stage reduces its gradients over its own dp x cp ranks.
    dp4 += contains(c.name, "dp group [stage 0]") && c.members.size() == 4 ? 1 : 0;
    dp2 += contains(c.name, "dp group [stage 1]") && c.members.size() == 2 ? 1 : 0;
  }
  const LinkPairs links = pipeline_link_pairs(run);
  CHECK(links.forward == expected);
  CHECK(links.backward == expected);
  CHECK(cp4 == 2);  // one per H100 TP rank
  CHECK(cp2 == 4);  // one per A100 TP rank
  CHECK(dp4 == 2);
  CHECK(dp2 == 4);
  // Every message of the boundary is one piece.
  for (int program = 0; program < 2; ++program) {
    for (const Task& task : run.plan.setup.programs.at(program).tasks) {
      if (task.comm_class == CommClass::PP) CHECK(task.bytes == static_cast<std::uint64_t>(piece));
    }
  }
  const JobReport a = simulate(s, Fidelity::Analytical);
  const JobReport f = simulate(s, Fidelity::Flow);
  REQUIRE(a.feasible);
  REQUIRE(f.feasible);
  CHECK(f.iteration_time_s == doctest::Approx(a.iteration_time_s).epsilon(0.03));
  CHECK(simulate(s, Fidelity::Analytical).iteration_time_s == a.iteration_time_s);
}

TEST_CASE("per-stage CP equal to parallel.cp gives the plain plan's time; CP errors name the key") {
  const char* plain = R"({
    "model": "llama3-8b",
    "cluster": {"node": "dgx-h100", "nodes": 2},
    "parallel": {"tp": 4, "cp": 2, "pp": 2, "dp": 1, "micro_batch": 1, "global_batch": 8, "sequence_parallel": true},
    "training": {"seq_len": 8192}
  })";
  const JobReport p = simulate(load(plain));
  const JobReport staged =
      simulate(load(plain, {R"(parallel.stages=[{"tp": 4, "cp": 2, "layers": 16}, {"tp": 4, "layers": 16}])"}));
  CHECK(staged.iteration_time_s == doctest::Approx(p.iteration_time_s).epsilon(1e-9));
  // CP 4 into CP 1 (every CP rank of stage 0 sends to the one of stage 1) is a layout.
  CHECK(testing::errors_of(kCpReshard, {R"(parallel.stages=[{"group": 0, "tp": 2, "cp": 4, "layers": 20},
                   {"group": 1, "tp": 8, "cp": 1, "layers": 12}])"})
            .empty());
  CHECK(contains(testing::errors_of(kCpReshard, {"training.seq_len=8190"}),
                 "/parallel/stages/0/cp: expected a divisor of the model's 8190 tokens per sample, found 4"));
  CHECK(contains(
      testing::errors_of(kCpReshard, {"parallel.dp=1", R"(parallel.stages=[{"group": 0, "tp": 2, "cp": 4, "layers": 20},
                   {"group": 1, "tp": 1, "cp": 3, "dp": 1, "layers": 12}])"}),
      "/parallel/stages/1/cp: a CP rank sends its tokens to the CP ranks that own them"));
}

TEST_CASE("a custom schedule with per-stage layouts: each stage its own unit order, deadlocks named") {
  // kCpReshard's two stages, 8 micro-batches: the built-in 1F1B written unit by unit.
  std::string first = "[\"F0\", \"F1\"", second = "[";
  for (int m = 0; m < 8; ++m) {
    if (m + 2 < 8) first += ", \"BW" + std::to_string(m) + "\", \"F" + std::to_string(m + 2) + "\"";
    second += std::string(m ? ", " : "") + "\"F" + std::to_string(m) + "\", \"BW" + std::to_string(m) + "\"";
  }
  first += ", \"BW6\", \"BW7\"]";
  second += "]";
  const std::string one_f_one_b = "parallel.schedule={\"units\": [" + first + ", " + second + "]}";
  const JobReport builtin = simulate(load(kCpReshard));
  const JobReport custom = simulate(load(kCpReshard, {one_f_one_b}));
  REQUIRE(custom.feasible);
  CHECK(custom.iteration_time_s == builtin.iteration_time_s);
  // Stage 0 in lockstep with stage 1 (no forward ahead) is valid and slower.
  const JobReport lockstep =
      simulate(load(kCpReshard, {"parallel.schedule={\"units\": [" + second + ", " + second + "]}"}));
  REQUIRE(lockstep.feasible);
  CHECK(lockstep.iteration_time_s > builtin.iteration_time_s);
  // Stage orders that wait on each other are refused at loading, naming the rank and unit.
  const std::string gpipe =
      "[\"F0\", \"F1\", \"F2\", \"F3\", \"F4\", \"F5\", \"F6\", \"F7\", "
      "\"BW7\", \"BW6\", \"BW5\", \"BW4\", \"BW3\", \"BW2\", \"BW1\", \"BW0\"]";
  const std::string dead =
      testing::errors_of(kCpReshard, {"parallel.schedule={\"units\": [" + second + ", " + gpipe + "]}"});
  CHECK(contains(dead, "/parallel/schedule: "));
  CHECK(contains(dead, "pipeline rank"));
  // Chunks other than the stages' layer blocks are refused.
  CHECK(contains(testing::errors_of(kCpReshard, {"parallel.schedule={\"units\": [" + second + ", " + second +
                                                 "], \"chunk_stages\": [1, 0]}"}),
                 "/parallel/schedule/chunk_stages: with per-stage layouts each stage holds one model chunk"));
}

TEST_CASE("per-stage DP and micro-batch errors name the key") {
  const std::string e1 = testing::errors_of(kDpReshard, {R"(parallel.stages=[{"group": 0, "tp": 4, "layers": 20},
                   {"group": 1, "tp": 2, "dp": 4, "micro_batch": 2, "layers": 12}])"});
  CHECK(contains(e1, "/parallel/stages/1/dp: every stage runs the same samples per pipeline step"));
  const std::string e2 =
      testing::errors_of(kDpReshard, {R"(parallel.stages=[{"group": 0, "tp": 4, "layers": 20, "micro_batch": 1},
                   {"group": 1, "tp": 2, "dp": 4, "micro_batch": 1, "layers": 12}])"});
  CHECK(contains(e2, "/parallel/stages/0/micro_batch: every stage runs the same samples per pipeline step"));
  const std::string e3 =
      testing::errors_of(kDpReshard, {"parallel.dp=4", "parallel.micro_batch=3", "parallel.global_batch=24",
                                      R"(parallel.stages=[{"group": 0, "tp": 2, "layers": 20},
                   {"group": 1, "tp": 2, "dp": 3, "micro_batch": 4, "layers": 12}])"});
  CHECK(contains(e3, "/parallel/stages/1/dp: a replica sends its samples to the replicas that own them"));
}

TEST_CASE("an encoder sub-model on its own stages with its own TP (LLaVA-style)") {
  const char* text = R"({
    "model": {"preset": "llama2-7b",
              "encoder": {"tokens": 577, "model": {"name": "vit-l", "layers": 24, "hidden": 1024, "heads": 16,
                          "ffn_hidden": 4096, "vocab": 1, "mlp": "gelu", "norm": "layernorm", "position": "learned",
                          "max_seq_len": 577}}},
    "cluster": {"groups": [{"node": "dgx-h100", "nodes": 2}, {"node": "dgx-a100", "nodes": 1}]},
    "parallel": {"pp": 2, "dp": 4, "micro_batch": 1, "global_batch": 32, "sequence_parallel": true,
                 "stages": [{"group": 1, "tp": 2, "layers": 24}, {"group": 0, "tp": 4, "layers": 32}]},
    "training": {"seq_len": 2048}
  })";
  const Scenario s = load(text);
  REQUIRE(s.model.encoder.size() == 1);
  CHECK(s.model.encoder_tokens == 577);
  const JobReport a = simulate(s, Fidelity::Analytical);
  REQUIRE(a.feasible);
  CHECK(simulate(s, Fidelity::Flow).feasible);
  CHECK(a.per_stage[0].layers == 24);
  CHECK(a.per_stage[0].gpus == std::vector<std::string>{"A100-SXM4-80GB"});
  // The encoder (300M parameters, 577 tokens) computes far less than the 7B LLM.
  CHECK(a.per_stage[0].time.compute_s < 0.3 * a.per_stage[1].time.compute_s);
  CHECK(a.pace_stage == 1);
  // More encoder tokens: more encoder work.
  const JobReport more = simulate(load(text, {"model.encoder.tokens=2308"}));
  CHECK(more.per_stage[0].time.compute_s > 2 * a.per_stage[0].time.compute_s);
}

TEST_CASE("per-stage layout and inline GPU errors name the key") {
  const std::string e1 = testing::errors_of(kMixed, {R"(parallel.stages=[{"tp": 4, "layers": 16}])"});
  CHECK(contains(e1, "/parallel/stages: expected one entry per pipeline stage (pp = 2)"));
  const std::string e2 =
      testing::errors_of(kMixed, {R"(parallel.stages=[{"tp": 4, "layers": 16}, {"tp": 4, "layers": 10}])"});
  CHECK(contains(e2, "/parallel/stages: the stages hold 26 layers"));
  const std::string e3 =
      testing::errors_of(kMixed, {R"(parallel.stages=[{"group": 5, "tp": 4, "layers": 16}, {"tp": 4, "layers": 16}])"});
  CHECK(contains(e3, "/parallel/stages/0/group: expected a node group index below 2"));
  const std::string e4 =
      testing::errors_of(kMixed, {R"(parallel.stages=[{"tp": 3, "layers": 16}, {"tp": 4, "layers": 16}])"});
  CHECK(contains(e4, "/parallel/stages/0/tp"));
  const std::string e5 =
      testing::errors_of(kMixed, {R"(parallel.stages=[{"tp": 4, "layers": 16, "tpp": 1}, {"tp": 4, "layers": 16}])"});
  CHECK(contains(e5, "/parallel/stages/0"));
  const std::string e6 = testing::errors_of(
      kMixed, {R"(cluster.groups=[{"node": {"preset": "dgx-h100", "gpu": {"name": "X1", "vendor": "nvidia"}}}])"});
  CHECK(contains(e6, "/cluster/groups/0/node/gpu"));
  const std::string e7 = testing::errors_of(
      kMixed, {R"(cluster.groups=[{"node": {"preset": "dgx-h100", "gpu": {"name": "X1", "vendor": "nvidia",
               "arch": "x", "peak_tflops": {"bf16": 500}, "memory": "64GB", "memory_bandwidth": "2TB/s",
               "scaleup_bandwidth": "900GB/s", "source": "test", "profile": "H999"}}, "nodes": 8}])"});
  CHECK(contains(e7, "/cluster/groups/0/node/gpu/profile: unknown GPU \"H999\""));
}

TEST_CASE("an inline GPU borrows a catalog profile and runs at its own figures") {
  const char* text = R"({
    "model": "llama3-8b",
    "cluster": {"node": {"preset": "dgx-h100", "gpu": {"name": "H100-half", "vendor": "nvidia", "arch": "hopper",
                "peak_tflops": {"bf16": 494.7}, "memory": "80GiB", "memory_bandwidth": "3.35TB/s",
                "scaleup_bandwidth": "900GB/s", "source": "test: an H100 at half the tensor peak",
                "profile": "H100-SXM-80GB"}}, "nodes": 1},
    "parallel": {"tp": 8, "micro_batch": 1, "global_batch": 8},
    "training": {"seq_len": 4096}
  })";
  const Scenario s = load(text);
  REQUIRE(s.profiles.size() == 1);
  CHECK(s.profiles[0].gpu == "H100-half");
  const JobReport half = simulate(s);
  const JobReport full = simulate(load(text, {R"(cluster.node="dgx-h100")"}));
  REQUIRE(half.feasible);
  CHECK(half.per_stage[0].time.compute_s > 1.5 * full.per_stage[0].time.compute_s);
}

// A 16-layer model on 8 H100 + 8 A100: small enough to rank every plan in well under a second.
constexpr const char* kSmallMixedFleet = R"({
  "model": {"name": "gpt-1b", "layers": 16, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 32000},
  "cluster": {"groups": [{"node": "dgx-h100", "nodes": 1}, {"node": "dgx-a100", "nodes": 1}]},
  "parallel": {"dp": 16, "micro_batch": 1, "global_batch": 128},
  "training": {"seq_len": 2048}
})";

TEST_CASE("mixed-fleet search: a plan at least as fast as every homogeneous plan on A100 + H100") {
  const Scenario s = load(kSmallMixedFleet);
  MixedFleetSearchSpace space;
  space.micro_batch = {2};
  space.max_stages_per_group = 2;
  space.layer_step = 2;
  const MixedFleetRanking r = rank_mixed_fleet(s, space);
  REQUIRE(!r.plans.empty());
  REQUIRE(r.best_homogeneous_s > 0);
  CHECK(r.plans.size() + r.infeasible == r.search.candidates.size());
  const RankedPlan& best = r.plans.front();
  CHECK(best.iteration_time_s <= r.best_homogeneous_s);
  // Balancing layers by GPU speed beats treating the GPUs alike by a clear margin.
  CHECK(!best.homogeneous);
  CHECK(best.speedup_vs_homogeneous > 1.1);
  // The best plan gives the H100 group more layers per GPU than the A100 group.
  int h100 = 0, a100 = 0;
  for (const StageLayout& st : best.par.stages) (st.group == 0 ? h100 : a100) += st.layers;
  CHECK(h100 > a100);
  MESSAGE("mixed-fleet search: " << r.search.enumerated << " plans enumerated, " << r.plans.size() << " ranked; best "
                                 << best.iteration_time_s << " s, best homogeneous " << r.best_homogeneous_s
                                 << " s, H100 layers " << h100 << ", A100 layers " << a100);
  // Ranked fastest first.
  for (std::size_t i = 1; i < r.plans.size(); ++i)
    CHECK(r.plans[i - 1].iteration_time_s <= r.plans[i].iteration_time_s);
}

TEST_CASE("mixed-fleet search with per-stage DP: valid plans whose stages differ in DP, ranked with the rest") {
  const Scenario s = load(kSmallMixedFleet);
  MixedFleetSearchSpace space;
  space.micro_batch = {2};
  space.max_stages_per_group = 1;
  space.layer_step = 4;
  const MixedFleetRanking one_dp = rank_mixed_fleet(s, space);
  space.stage_dp = true;
  const MixedFleetRanking r = rank_mixed_fleet(s, space);
  int differing = 0;
  for (const MixedFleetCandidate& c : r.search.candidates) {
    std::set<int> dps;
    for (int st = 0; st < c.par.pp; ++st) {
      dps.insert(stage_dp(c.par, st));
      CHECK(stage_dp(c.par, st) * stage_micro_batch(c.par, st) == c.par.dp * c.par.micro_batch);
    }
    differing += dps.size() > 1 ? 1 : 0;
  }
  CHECK(differing > 0);
  CHECK(r.search.candidates.size() == one_dp.search.candidates.size() + static_cast<std::size_t>(differing));
  REQUIRE(!r.plans.empty());
  // The plans with one DP are among them, so the best can only be as fast or faster.
  CHECK(r.plans.front().iteration_time_s <= one_dp.plans.front().iteration_time_s);
  int ranked_differing = 0;
  for (const RankedPlan& p : r.plans) {
    std::set<int> dps;
    for (int st = 0; st < p.par.pp; ++st) dps.insert(stage_dp(p.par, st));
    ranked_differing += dps.size() > 1 ? 1 : 0;
  }
  CHECK(ranked_differing > 0);
  MESSAGE("per-stage DP search: " << r.search.candidates.size() << " candidates (" << differing
                                  << " with stages of different DP), best " << r.plans.front().iteration_time_s
                                  << " s against " << one_dp.plans.front().iteration_time_s << " s with one DP");
}

TEST_CASE("the shipped mixed-fleet sweep expands into per-stage plans, some treating every GPU alike") {
  const SweepSpec spec = load_sweep_file(
      std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/sweeps/gpt-1b-h100-a100-mixed-fleet.json", testing::catalog());
  CHECK(spec.mixed_fleet);
  const SweepPlan plan = expand_sweep(spec, testing::catalog());
  REQUIRE(!plan.points.empty());
  int alike = 0, per_group = 0;
  for (const SweepPoint& p : plan.points) {
    REQUIRE(p.overrides.back().first == "parallel.stages");
    const nlohmann::json& stages = p.overrides.back().second;
    (stages.front().contains("group") ? per_group : alike) += 1;
  }
  CHECK(alike > 0);
  CHECK(per_group > alike);
}

TEST_CASE("NVIDIA and AMD in one job: runs, and the cross-vendor communicators are a warning") {
  const Scenario s =
      load(kMixed, {R"(cluster.groups=[{"node": "dgx-h100", "nodes": 4}, {"node": "mi300x-8", "nodes": 4}])"});
  const JobReport r = simulate(s);
  REQUIRE(r.feasible);
  CHECK(r.per_stage[1].gpus == std::vector<std::string>{"MI300X"});
  bool warned = false;
  for (const std::string& w : r.warnings) warned = warned || contains(w, "span GPU vendors");
  CHECK(warned);  // the pipeline links between the H100 and MI300X stages
  CHECK(simulate(load(kMixed)).warnings.empty());
}

TEST_CASE("Sailor GH200 runs: at micro-batch 8 the simulator orders the layouts of each node count as measured") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(TRAINSIM_SOURCE_DIR) / "scenarios" / "validation-hetero";
  // Runs of one node count and global batch differ only in PP x DP: order them by measured and by predicted time.
  std::map<std::string, std::vector<std::pair<double, double>>> by_nodes;  // "N<nodes>" -> (measured, predicted)
  for (const auto& e : fs::directory_iterator(dir)) {
    const Scenario s = load_scenario_file(e.path().string(), {}, testing::catalog());
    REQUIRE(s.expected.has_value());
    if (s.parallel.micro_batch != 8) continue;
    const std::string key =
        std::to_string(s.cluster.groups.front().count) + "/" + std::to_string(s.parallel.global_batch);
    by_nodes[key].emplace_back(s.expected->value, simulate(s).iteration_time_s);
  }
  int ordered = 0;
  for (auto& entry : by_nodes) {
    const auto& key = entry.first;  // a named variable: doctest's message macros cannot take a binding (clang 14)
    auto& runs = entry.second;
    if (runs.size() < 2) continue;
    std::sort(runs.begin(), runs.end());
    for (std::size_t i = 1; i < runs.size(); ++i) CHECK_MESSAGE(runs[i - 1].second < runs[i].second, key);
    ++ordered;
  }
  CHECK(ordered == 3);  // 8, 16 and 32 nodes
}

TEST_CASE("Sailor GH200 runs: at micro-batch 1 a host-bound layer takes the profile floor its host figure comes from") {
  // tools/make-hetero-validation-scenarios derives training.host_dispatch_us from Sailor's
  // per-layer profile: 1.509 ms forward + 1.719 ms backward at TP 4, over the 14 + 29
  // kernels the model issues for such a layer. If those kernel lists change, the figure
  // must be derived again; this checks the layer still reproduces the floor.
  const std::string path =
      std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/validation-hetero/sailor_clariden_gh200_OPT-350_N1_D1_M4_G1.json";
  const Scenario s = load_scenario_file(path, {}, testing::catalog());
  REQUIRE(s.parallel.micro_batch == 1);
  double layer = 0;
  for (const KernelRow& row : stage_kernels(s, 0).rows) {
    if (row.count == s.model.layers) layer += row.seconds / row.count;  // one layer's steps, once per layer
  }
  CHECK(layer == doctest::Approx(1.509e-3 + 1.719e-3).epsilon(0.01));
}

TEST_CASE("behind an encoder, the model's first stage holds the token embedding in memory") {
  const char* text = R"({
    "model": {"preset": "llama2-7b",
              "encoder": {"tokens": 577, "model": {"name": "vit-l", "layers": 24, "hidden": 1024, "heads": 16,
                          "ffn_hidden": 4096, "vocab": 1, "mlp": "gelu", "norm": "layernorm", "position": "learned",
                          "max_seq_len": 577}}},
    "cluster": {"node": "dgx-h100", "nodes": 3},
    "parallel": {"pp": 3, "dp": 1, "micro_batch": 1, "global_batch": 8,
                 "stages": [{"tp": 8, "layers": 24}, {"tp": 8, "layers": 16}, {"tp": 8, "layers": 16}]},
    "training": {"seq_len": 2048}
  })";
  const JobReport r = simulate(load(text));
  REQUIRE(r.feasible);
  // Llama-2 7B: 32000 x 4096 embedding and as large an (untied) output layer, over TP 8, 2 bytes a weight.
  const double embedding = 32000.0 * 4096 / 8 * 2;
  CHECK(r.per_stage[1].memory.weights == doctest::Approx(r.per_stage[2].memory.weights).epsilon(1e-9));
  CHECK(r.per_stage[1].memory.weights > embedding);
}
