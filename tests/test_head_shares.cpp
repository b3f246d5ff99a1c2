// Uneven Ulysses head shares (parallel.head_shares) on a CP group of an H100 and
// an A100 node: the all-to-all-v bytes of each pair by hand, their time by hand,
// "auto" beating even shares at both fidelities, and bad shares as input errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model_fixtures.hpp"
#include "models/layer_steps.hpp"
#include "scenario_fixtures.hpp"
#include "sim/platform.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

// Llama-3.1 8B at 32k tokens, TP 4 (8 query and 2 KV heads per TP rank), Ulysses CP
// 2 across the nodes (the placement puts DP inside each node): CP rank 0 on the DGX
// H100, CP rank 1 on the DGX A100.
const char* kMixedUlysses = R"({
  "model": "llama3.1-8b",
  "cluster": {"groups": [{"node": "dgx-h100", "nodes": 1}, {"node": "dgx-a100", "nodes": 1}]},
  "parallel": {"tp": 4, "cp": 2, "cp_kind": "ulysses", "dp": 2, "micro_batch": 1, "global_batch": 2,
               "sequence_parallel": true, "recompute": "full", "placement": "tp-dp-cp-ep-pp"},
  "training": {"seq_len": 32768}
})";

Scenario load(const std::vector<std::string>& sets) {
  return load_scenario_text(kMixedUlysses, "s.json", "", sets, testing::catalog());
}

JobReport run(const std::vector<std::string>& sets, Fidelity f) {
  const JobReport r = simulate(load(sets), f);
  REQUIRE(r.feasible);
  return r;
}

const Step& step_named(const std::vector<Step>& steps, const std::string& name) {
  const auto it = std::find_if(steps.begin(), steps.end(), [&](const Step& s) { return s.name == name; });
  REQUIRE(it != steps.end());
  return *it;
}

}  // namespace

TEST_CASE("uneven head shares: each pair of the Ulysses all-to-alls carries its heads of its tokens") {
  // GQA: 8 query heads and 2 KV heads per TP rank (groups of 4), head size 128,
  // 16384 tokens per CP rank, 2-byte activations. Shares [5, 3]: rank 0 attends
  // with heads 0-4 (groups 0 and 1: 2 KV heads), rank 1 with heads 5-7 (group 1:
  // 1 KV head, sent to both ranks).
  Scenario s = load({"parallel.head_shares=[5, 3]"});
  ParallelSpec one = s.parallel;
  one.cp_rank = 0;
  const ModelSteps steps = build_model_steps(s.model, one, s.training);
  const LayerSteps& L = steps.of(LayerKind::Dense);
  const double tokens = 16384, d = 128, e = 2;
  const Step& qkv = step_named(L.forward, "cp.a2a.qkv");
  REQUIRE(qkv.matrix >= 0);
  const std::vector<double>& m = steps.traffic[static_cast<std::size_t>(qkv.matrix)];
  REQUIRE(m.size() == 4);
  CHECK(m[0 * 2 + 1] == tokens * (3 + 2 * 1) * d * e);  // rank 0's tokens of rank 1's 3 Q and 1 K/V heads
  CHECK(m[1 * 2 + 0] == tokens * (5 + 2 * 2) * d * e);  // rank 1's tokens of rank 0's 5 Q and 2 K/V heads
  CHECK(m[0] == tokens * (5 + 2 * 2) * d * e);          // what rank 0 keeps of its own
  const Step& out = step_named(L.forward, "cp.a2a.out");
  const std::vector<double>& o = steps.traffic[static_cast<std::size_t>(out.matrix)];
  CHECK(o[0 * 2 + 1] == tokens * 5 * d * e);  // rank 0 returns its 5 heads' output of rank 1's tokens
  CHECK(o[1 * 2 + 0] == tokens * 3 * d * e);
  // The backward moves the gradients of the same tensors the other way.
  CHECK(steps.traffic[static_cast<std::size_t>(step_named(L.backward, "cp.a2a.qkv.grad").matrix)][1 * 2 + 0] ==
        m[0 * 2 + 1]);
  CHECK(steps.traffic[static_cast<std::size_t>(step_named(L.backward, "cp.a2a.out.grad").matrix)][0 * 2 + 1] ==
        o[1 * 2 + 0]);
  // Rank 0's attention runs 5 of the 8 heads over the whole sequence: 5/4 of an even share's FLOPs.
  ParallelSpec even = s.parallel;
  even.head_shares.clear();
  const double even_flops =
      step_named(build_model_steps(s.model, even, s.training).of(LayerKind::Dense).forward, "attn.core").op.flops;
  CHECK(step_named(L.forward, "attn.core").op.flops == doctest::Approx(even_flops * 5 / 4));

  // Its time by hand: each GPU of the pair sends and receives through its own NIC;
  // the larger direction, rank 1 -> rank 0 (9 heads' worth), sets the time at the
  // slower member's NIC bandwidth, after one network hop.
  const Platform platform(s.cluster, s.profiles);
  const AnalyticalNetwork& net = platform.analytical_network();
  const std::vector<int> members{0, 8};  // TP rank 0, DP rank 0 of each CP rank
  const CommShape shape = net.shape(members);
  CHECK(net.all_to_all_v_seconds(shape, members, m) ==
        doctest::Approx(shape.base_latency + shape.network_latency + m[1 * 2 + 0] / shape.network_bw));
}

TEST_CASE("uneven head shares on an H100 + A100 Ulysses group: auto beats even, at both fidelities") {
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    const JobReport plain = run({}, f);
    CHECK(plain.head_shares.empty());
    // Explicit even shares (2 KV heads over 2 ranks: nothing replicated) time as the plain all-to-all.
    const JobReport even = run({"parallel.head_shares=[4, 4]"}, f);
    CHECK(even.iteration_time_s == doctest::Approx(plain.iteration_time_s).epsilon(1e-9));
    CHECK(even.cp_pace_rank == 1);  // the A100 rank computes longer on an even share

    const JobReport by_speed = run({R"(parallel.head_shares="auto")"}, f);
    REQUIRE(by_speed.head_shares.size() == 2);
    CHECK(by_speed.head_shares[0] + by_speed.head_shares[1] == 8);
    CHECK(by_speed.head_shares[0] > by_speed.head_shares[1]);
    CHECK(by_speed.iteration_time_s < 0.95 * plain.iteration_time_s);
    // Shares change who computes what, not the work: the model FLOPs per iteration are the same.
    CHECK(by_speed.tflops_per_gpu * by_speed.iteration_time_s ==
          doctest::Approx(plain.tflops_per_gpu * plain.iteration_time_s).epsilon(1e-9));
    // With the sequence shared by speed too, the A100 rank also runs fewer tokens.
    const JobReport both = run({R"(parallel.head_shares="auto")", R"(parallel.cp_shares="auto")"}, f);
    REQUIRE(both.cp_shares.size() == 2);
    CHECK(both.cp_shares[0] > both.cp_shares[1]);
    CHECK(both.iteration_time_s < by_speed.iteration_time_s);

    const nlohmann::json j = to_json(by_speed);
    CHECK(j["head_shares"]["heads"][0] == by_speed.head_shares[0]);
    CHECK(summary_text(by_speed).find("head shares (heads per tp rank): " + std::to_string(by_speed.head_shares[0]) +
                                      " " + std::to_string(by_speed.head_shares[1])) != std::string::npos);
    // Deterministic: the same run repeats bit for bit.
    CHECK(run({R"(parallel.head_shares="auto")"}, f).iteration_time_s == by_speed.iteration_time_s);
  }
}

TEST_CASE("even Ulysses replicating KV heads sends each replica: the plain all-to-all equals explicit even shares") {
  // TP 8: 4 query heads and 1 KV head per TP rank over Ulysses 2, so the KV head is
  // replicated and each member receives it: 4 + 2 x 2 heads of 128 per token, 16384
  // tokens per CP rank, 2-byte activations.
  const std::vector<std::string> tp8 = {"parallel.tp=8", "parallel.dp=1"};
  Scenario s = load(tp8);
  ParallelSpec one = s.parallel;
  one.cp_rank = 0;
  const ModelSteps steps = build_model_steps(s.model, one, s.training);
  CHECK(step_named(steps.of(LayerKind::Dense).forward, "cp.a2a.qkv").bytes ==
        doctest::Approx(16384.0 * (4 + 2 * 2) * 128 * 2));
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    std::vector<std::string> even = tp8;
    even.push_back("parallel.head_shares=[2, 2]");
    CHECK(run(even, f).iteration_time_s == doctest::Approx(run(tp8, f).iteration_time_s).epsilon(1e-9));
  }
}

TEST_CASE("bad head shares are input errors at their JSON pointer") {
  auto errors = [](const std::vector<std::string>& sets) { return testing::errors_of(kMixedUlysses, sets); };
  CHECK(errors({"parallel.head_shares=[5, 3]"}).empty());
  CHECK(errors({"parallel.head_shares=[5, 4]"}).find("/parallel/head_shares: the shares sum to 9 heads") !=
        std::string::npos);
  CHECK(errors({"parallel.head_shares=[8]"}).find("/parallel/head_shares: expected one head count per Ulysses rank") !=
        std::string::npos);
  CHECK(errors({"parallel.head_shares=[8, 0]"}).find("/parallel/head_shares/1: expected a head count") !=
        std::string::npos);
  CHECK(errors({R"(parallel.head_shares="fast")"}).find("/parallel/head_shares: expected \"even\", \"auto\"") !=
        std::string::npos);
  CHECK(errors({R"(parallel.head_shares="auto")", R"(parallel.cp_kind="ring")"})
            .find("/parallel/head_shares: uneven head shares need Ulysses or hybrid CP") != std::string::npos);
  CHECK(errors({R"(parallel.head_shares="auto")", R"(parallel.dp_shares="balanced")"})
            .find("/parallel/head_shares: uneven head shares together with parallel.dp_shares") != std::string::npos);
  // Shares need not split the heads evenly: 7 heads of a TP rank over 2 Ulysses ranks.
  CHECK(errors({"model.heads=28", "model.hidden=3584", "model.kv_heads=4", "parallel.head_shares=[4, 3]"}).empty());
  CHECK(
      errors({"model.heads=28", "model.hidden=3584", "model.kv_heads=4"}).find("/parallel/cp: Ulysses splits the 7") !=
      std::string::npos);
}

TEST_CASE("uneven head shares under hybrid CP: Ulysses groups of an H100 and an A100, rings of one type") {
  // CP 4 over four nodes (H100, A100, H100, A100), Ulysses over CP rank pairs {0, 1}
  // and {2, 3} (each an H100 and an A100), rings {0, 2} of H100s and {1, 3} of A100s,
  // each ring gathering K and V for its Ulysses index's heads.
  const std::string text = testing::replace(
      testing::replace(
          kMixedUlysses, R"({"node": "dgx-a100", "nodes": 1}]})",
          R"({"node": "dgx-a100", "nodes": 1}, {"node": "dgx-h100", "nodes": 1}, {"node": "dgx-a100", "nodes": 1}]})"),
      R"("cp": 2, "cp_kind": "ulysses")", R"("cp": 4, "cp_kind": "hybrid", "cp_ulysses": 2)");
  auto hybrid = [&](std::vector<std::string> sets, Fidelity f) {
    sets.push_back("training.seq_len=65536");  // 16k tokens per CP rank: attention a larger part of the step
    const JobReport r = simulate(load_scenario_text(text, "s.json", "", sets, testing::catalog()), f);
    REQUIRE(r.feasible);
    return r;
  };
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    const JobReport plain = hybrid({}, f);
    CHECK(hybrid({"parallel.head_shares=[4, 4]"}, f).iteration_time_s ==
          doctest::Approx(plain.iteration_time_s).epsilon(1e-9));
    const JobReport by_speed = hybrid({R"(parallel.head_shares="auto")"}, f);
    REQUIRE(by_speed.head_shares.size() == 2);
    CHECK(by_speed.head_shares[0] > by_speed.head_shares[1]);
    CHECK(by_speed.iteration_time_s < 0.95 * plain.iteration_time_s);
  }
}

TEST_CASE("docs/limits.md lists the head_shares bounds, and the programs per CP rank count against them") {
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/docs/limits.md");
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str().find("| `parallel.head_shares` (docs/heterogeneous.md) | `\"even\"`, `\"auto\"`, or one entry per "
                      "Ulysses rank") != std::string::npos);
  CHECK(testing::errors_of(kMixedUlysses, {"parallel.global_batch=16386", R"(parallel.head_shares="auto")"})
            .find("/parallel/head_shares: micro-batches x cp") != std::string::npos);
}
