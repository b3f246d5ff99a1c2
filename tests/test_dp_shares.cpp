// Uneven data-parallel shares of the batch (parallel.dp_shares): straggler
// mitigation and mixed GPU types, against hand calculations, at both
// fidelities; bad shares are input errors naming their JSON pointer.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "scenario_fixtures.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

// Eight A100 in data parallel, 8 micro-batches of 2 sequences each, gradients
// all-reduced after the backward (no overlap), so an iteration is each
// replica's micro-batches, then the all-reduce every replica meets at, then
// the optimizer step.
const char* kEight = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 1},
  "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 2, "global_batch": 128, "dp_overlap": false},
  "training": {"seq_len": 2048}
})";
const char* kSlowGpu5 = R"(perturbations={"gpus": [{"gpu": 5, "slowdown": 2}]})";

JobReport run(const char* text, const std::vector<std::string>& sets, Fidelity f) {
  return simulate(load_scenario_text(text, "s.json", "", sets, testing::catalog()), f);
}

}  // namespace

TEST_CASE(
    "a straggler at half speed: balanced shares give it half the micro-batches, and the iteration follows "
    "the hand calculation, at both fidelities") {
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    // One micro-batch's compute on an A100: the difference of 16 and 8 micro-batches per replica, over 8.
    const JobReport clean8 = run(kEight, {}, f);
    const JobReport clean16 = run(kEight, {"parallel.global_batch=256"}, f);
    const double mb = (clean16.iteration_time_s - clean8.iteration_time_s) / 8;
    REQUIRE(mb > 0);
    CHECK(clean8.dp_shares.empty());

    // Even shares: the slowed replica's 8 micro-batches take 16 mb, the rest 8 mb.
    const JobReport even = run(kEight, {kSlowGpu5}, f);
    CHECK(even.iteration_time_s - clean8.iteration_time_s == doctest::Approx(8 * mb).epsilon(0.02));

    // Balanced: speeds 1 (x7) and 1/2 share 64 micro-batches as 8.53 and 4.27,
    // rounded down to 8 and 4 with the 4 left over going to replicas 0-3.
    const JobReport bal = run(kEight, {kSlowGpu5, R"(parallel.dp_shares="balanced")"}, f);
    CHECK(bal.dp_shares == std::vector<int>{9, 9, 9, 9, 8, 4, 8, 8});
    // The critical replica now runs 9 mb (replicas 0-3) instead of 16 mb.
    const double hand = even.iteration_time_s - (16 - 9) * mb;
    CHECK(bal.iteration_time_s == doctest::Approx(hand).epsilon(0.01));
    CHECK(bal.iteration_time_s < 0.75 * even.iteration_time_s);
    // Equivalence classes: one simulated rank per distinct (share, GPU pace); the flow model runs every rank.
    CHECK(bal.simulated_ranks == (f == Fidelity::Analytical ? 3 : 8));

    // Explicit shares: the slowed replica with 6 (12 mb) sets the pace; with 4 (8 mb) replica 0's 10 does.
    const JobReport six = run(kEight, {kSlowGpu5, "parallel.dp_shares=[8, 8, 8, 8, 8, 6, 9, 9]"}, f);
    CHECK(six.iteration_time_s == doctest::Approx(even.iteration_time_s - (16 - 12) * mb).epsilon(0.01));
    const JobReport four = run(kEight, {kSlowGpu5, "parallel.dp_shares=[10, 10, 10, 10, 10, 4, 5, 5]"}, f);
    CHECK(four.iteration_time_s == doctest::Approx(even.iteration_time_s - (16 - 10) * mb).epsilon(0.01));
    CHECK(bal.iteration_time_s < four.iteration_time_s);

    // Without a straggler "balanced" is the even split, to the nanosecond.
    const JobReport same = run(kEight, {R"(parallel.dp_shares="balanced")"}, f);
    CHECK(same.dp_shares == std::vector<int>(8, 8));
    CHECK(same.iteration_time_s == clean8.iteration_time_s);
    // The report lists the shares.
    CHECK(to_json(bal)["dp_shares"][0]["micro_batches"] == 9);
    CHECK(to_json(bal)["dp_shares"][2]["first_replica"] == 5);
    CHECK(summary_text(bal).find("dp shares (micro-batches x replicas): 9 x 4 8 x 3 4 x 1") != std::string::npos);
  }
}

TEST_CASE("an H100 group and an A100 group in data parallel: balanced shares beat even ones") {
  const char* mixed = R"({
    "model": "gpt3-1.3b",
    "cluster": {"groups": [{"node": "dgx-h100", "nodes": 1}, {"node": "dgx-a100", "nodes": 1}]},
    "parallel": {"tp": 1, "pp": 1, "dp": 16, "micro_batch": 2, "global_batch": 256, "dp_overlap": false},
    "training": {"seq_len": 2048}
  })";
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    const JobReport even = run(mixed, {}, f);
    const JobReport bal = run(mixed, {R"(parallel.dp_shares="balanced")"}, f);
    REQUIRE(bal.dp_shares.size() == 16);
    // The H100 replicas (GPUs 0-7) take more of the batch than the A100 ones.
    CHECK(*std::min_element(bal.dp_shares.begin(), bal.dp_shares.begin() + 8) >
          *std::max_element(bal.dp_shares.begin() + 8, bal.dp_shares.end()));
    CHECK(bal.iteration_time_s < even.iteration_time_s);
  }
}

TEST_CASE("uneven shares with pipeline parallelism: each replica its own 1F1B schedule") {
  // kEight as two pipeline stages of four replicas, 8 micro-batches each.
  const auto pp = [](std::vector<std::string> sets) {
    sets.insert(sets.begin(), {"parallel.pp=2", "parallel.dp=4", "parallel.global_batch=64"});
    return run(kEight, sets, Fidelity::Analytical);
  };
  const JobReport even = pp({});
  const JobReport fewer = pp({"parallel.dp_shares=[8, 8, 8, 8]"});
  CHECK(fewer.iteration_time_s == even.iteration_time_s);
  const JobReport uneven = pp({"parallel.dp_shares=[10, 10, 10, 2]"});
  CHECK(uneven.iteration_time_s > even.iteration_time_s);
  // GPU 3 (replica 3 of stage 0) slowed 3x: "balanced" gives its replica the fewest.
  const JobReport bal =
      pp({R"(perturbations={"gpus": [{"gpu": 3, "slowdown": 3}]})", R"(parallel.dp_shares="balanced")"});
  REQUIRE(bal.dp_shares.size() == 4);
  CHECK(bal.dp_shares[3] < bal.dp_shares[0]);
}

TEST_CASE("uneven shares: bad input names the pointer") {
  auto errors = [](const std::vector<std::string>& sets) { return testing::errors_of(kEight, sets); };
  CHECK(errors({"parallel.dp_shares=[8, 8, 8, 8, 8, 8, 8, 9]"})
            .find("/parallel/dp_shares: the shares sum to 65 micro-batches; global_batch / micro_batch = 128 / 2 = "
                  "64") != std::string::npos);
  CHECK(errors({"parallel.dp_shares=[8, 8, 8, 16, 0, 8, 8, 8]"})
            .find("/parallel/dp_shares/4: a replica needs at least one micro-batch, found 0") != std::string::npos);
  CHECK(errors({"parallel.dp_shares=[8, 8]"}).find("/parallel/dp_shares: expected one micro-batch count per") !=
        std::string::npos);
  CHECK(errors({"parallel.dp_shares=[8, 8, 8, 8, 8, 8, 8, -8]"}).find("/parallel/dp_shares/7: expected") !=
        std::string::npos);
  CHECK(errors({R"(parallel.dp_shares="fast")"}).find("/parallel/dp_shares: expected \"even\"") != std::string::npos);
  CHECK(errors({R"(parallel.dp_shares="balanced")", "parallel.zero=3"}).find("/parallel/dp_shares: ZeRO-3") !=
        std::string::npos);
  // A batch an even split cannot take is fine for explicit shares.
  CHECK(errors({"parallel.global_batch=130", "parallel.dp_shares=[9, 8, 8, 8, 8, 8, 8, 8]"}).empty());
  // Per-replica schedule rules: interleaved 1F1B needs multiples of pp.
  CHECK(errors({"parallel.pp=2", "parallel.dp=4", "parallel.vpp=2", "parallel.dp_shares=[17, 15, 16, 16]"})
            .find("/parallel/dp_shares/0: interleaved-1f1b needs each replica's micro-batch count to be a multiple "
                  "of pp = 2, found 17") != std::string::npos);
  CHECK(errors({"parallel.pp=2", "parallel.dp=4", R"(parallel.schedule="dualpipe-v")",
                "parallel.dp_shares=[30, 30, 1, 3]"})
            .find("/parallel/dp_shares/2: dualpipe-v needs at least 2*pp = 4 micro-batches per replica, found 1") !=
        std::string::npos);
  // Per-stage layouts take shares when every stage has parallel.dp replicas, not otherwise.
  CHECK(errors({"parallel.pp=2", "parallel.dp=4", R"(parallel.dp_shares="balanced")",
                R"(parallel.stages=[{"tp": 1, "layers": 12}, {"tp": 1, "layers": 12}])"})
            .empty());
  CHECK(errors({"parallel.pp=2", "parallel.dp=4", R"(parallel.dp_shares="balanced")",
                R"(parallel.stages=[{"tp": 1, "layers": 12}, {"tp": 1, "dp": 2, "micro_batch": 4, "layers": 12}])"})
            .find("/parallel/dp_shares: uneven data-parallel shares with per-stage layouts need every stage's dp to "
                  "be parallel.dp = 4") != std::string::npos);
}

TEST_CASE("uneven shares with per-stage layouts: each replica a pipeline of its own, at both fidelities") {
  // Two stages of TP 4 x DP 4, each over an H100 and an A100 node (no `group`: the
  // next free GPUs), so replicas 0-1 run on H100s and 2-3 on A100s in both stages.
  const char* mixed = R"({
    "model": "llama3-8b",
    "cluster": {"groups": [{"node": "dgx-h100", "nodes": 1}, {"node": "dgx-a100", "nodes": 1},
                           {"node": "dgx-h100", "nodes": 1}, {"node": "dgx-a100", "nodes": 1}]},
    "parallel": {"tp": 4, "pp": 2, "dp": 4, "micro_batch": 1, "global_batch": 64, "sequence_parallel": true,
                 "stages": [{"tp": 4, "layers": 16}, {"tp": 4, "layers": 16}]},
    "training": {"seq_len": 4096}
  })";
  const std::string plain = testing::replace(mixed, R"(,
                 "stages": [{"tp": 4, "layers": 16}, {"tp": 4, "layers": 16}])",
                                             "");
  REQUIRE(plain.find("stages") == std::string::npos);
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    const JobReport even = run(mixed, {}, f);
    const JobReport bal = run(mixed, {R"(parallel.dp_shares="balanced")"}, f);
    CHECK(bal.dp_shares == std::vector<int>{22, 22, 10, 10});  // docs/heterogeneous.md
    REQUIRE(bal.dp_shares.size() == 4);
    CHECK(bal.dp_shares[0] == bal.dp_shares[1]);
    CHECK(bal.dp_shares[0] > bal.dp_shares[2]);  // the H100 replicas take more
    CHECK(bal.dp_shares[2] == bal.dp_shares[3]);
    CHECK(bal.iteration_time_s < 0.8 * even.iteration_time_s);
    // Stages that repeat the plain layout give the plain plan's shares and iteration.
    const JobReport plain_bal = run(plain.c_str(), {R"(parallel.dp_shares="balanced")"}, f);
    CHECK(plain_bal.dp_shares == bal.dp_shares);
    CHECK(plain_bal.iteration_time_s == doctest::Approx(bal.iteration_time_s).epsilon(1e-9));
    // A stage of its own recomputation still runs: stage 1's replicas keep their shares.
    const JobReport selective =
        run(mixed,
            {R"(parallel.dp_shares="balanced")",
             R"(parallel.stages=[{"tp": 4, "layers": 16}, {"tp": 4, "layers": 16, "recompute": "selective"}])"},
            f);
    CHECK(selective.feasible);
    CHECK(selective.iteration_time_s < 0.8 * even.iteration_time_s);
  }
}

TEST_CASE("docs/limits.md lists the dp_shares bounds") {
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/docs/limits.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  CHECK(doc.find("| `parallel.dp_shares` (docs/heterogeneous.md) | `\"even\"`, `\"balanced\"`, or dp entries of 1 to "
                 "2^30 summing to `global_batch / micro_batch` |") != std::string::npos);
  CHECK(doc.find("| micro-batches of one replica with `parallel.dp_shares` | at most 16,384") != std::string::npos);
  CHECK(doc.find("| `parallel.dp_shares` under `interleaved-1f1b` / `dualpipe-v` | each entry a multiple of pp / at "
                 "least 2*pp |") != std::string::npos);
  // The bound applies to the largest share.
  std::string shares = "[16385";
  for (int i = 0; i < 7; ++i) shares += ", 1";
  CHECK(testing::errors_of(kEight, {"parallel.global_batch=32784", "parallel.dp_shares=" + shares + "]"})
            .find("/parallel/dp_shares: the distinct shares (one program each) add up to 16386 micro-batches") !=
        std::string::npos);
  // Distinct shares each build their programs: their sum is bounded, not only the largest.
  std::string many = "[";
  for (int i = 0; i < 8; ++i) many += (i ? ", " : "") + std::to_string(4000 + i);
  CHECK(testing::errors_of(kEight, {"parallel.global_batch=64056", "parallel.dp_shares=" + many + "]"})
            .find("add up to 32028 micro-batches") != std::string::npos);
  CHECK(testing::errors_of(kEight, {"parallel.global_batch=32784", R"(parallel.dp_shares="balanced")"})
            .find("/parallel/dp_shares: \"balanced\" shares of global_batch / micro_batch = 16392") !=
        std::string::npos);
}
