// Uneven ring-CP sequence shares (parallel.cp_shares) on a CP group of an H100
// and an A100 node: shares by speed beat even ones at both fidelities, the
// shares follow the GPUs' compute speeds, and bad shares are input errors.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "scenario_fixtures.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

// Llama-3.1 8B at 32k tokens, TP 8 inside each node, CP 2 across them: CP rank
// 0 on the DGX H100, CP rank 1 on the DGX A100.
const char* kMixedCp = R"({
  "model": "llama3.1-8b",
  "cluster": {"groups": [{"node": "dgx-h100", "nodes": 1}, {"node": "dgx-a100", "nodes": 1}]},
  "parallel": {"tp": 8, "cp": 2, "dp": 1, "micro_batch": 1, "global_batch": 2, "sequence_parallel": true,
               "recompute": "full"},
  "training": {"seq_len": 32768}
})";

JobReport run(const std::vector<std::string>& sets, Fidelity f) {
  return simulate(load_scenario_text(kMixedCp, "s.json", "", sets, testing::catalog()), f);
}

}  // namespace

TEST_CASE("uneven CP shares on an H100 + A100 CP group: by speed beats even, at both fidelities") {
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    const JobReport plain = run({}, f);
    CHECK(plain.cp_shares.empty());
    // Explicit even shares are the plain ring to the nanosecond.
    const JobReport even = run({"parallel.cp_shares=[16384, 16384]"}, f);
    CHECK(even.iteration_time_s == plain.iteration_time_s);
    CHECK(even.cp_pace_rank == 1);  // the A100 rank computes longer on an even share

    const JobReport by_speed = run({R"(parallel.cp_shares="auto")"}, f);
    REQUIRE(by_speed.cp_shares.size() == 2);
    CHECK(by_speed.cp_shares[0] + by_speed.cp_shares[1] == 32768);
    CHECK(by_speed.cp_shares[0] > by_speed.cp_shares[1]);
    CHECK(by_speed.iteration_time_s < 0.8 * plain.iteration_time_s);
    // An H100-heavy share short of the speed ratio lands in between.
    const JobReport part = run({"parallel.cp_shares=[20480, 12288]"}, f);
    CHECK(part.cp_shares == std::vector<int>{20480, 12288});
    CHECK(part.iteration_time_s < plain.iteration_time_s);
    CHECK(part.iteration_time_s > by_speed.iteration_time_s);
    // Shares change who computes what, not the work: the model FLOPs per iteration are the same.
    CHECK(by_speed.tflops_per_gpu * by_speed.iteration_time_s ==
          doctest::Approx(plain.tflops_per_gpu * plain.iteration_time_s).epsilon(1e-9));

    const nlohmann::json j = to_json(by_speed);
    CHECK(j["cp_shares"]["tokens"][0] == by_speed.cp_shares[0]);
    CHECK(summary_text(by_speed).find("cp shares (tokens): " + std::to_string(by_speed.cp_shares[0]) + " " +
                                      std::to_string(by_speed.cp_shares[1])) != std::string::npos);
    // Deterministic: the same run repeats bit for bit.
    CHECK(run({R"(parallel.cp_shares="auto")"}, f).iteration_time_s == by_speed.iteration_time_s);
  }
}

TEST_CASE("\"auto\" CP shares follow the ratio of the two GPUs' compute times on an even share") {
  // The compute per micro-batch of each CP rank on an even share, from runs of
  // two H100 nodes and two A100 nodes; under the causal load-balancing split a
  // rank's work is linear in its tokens, so the H100 rank's share is
  // 32768 * t_A100 / (t_A100 + t_H100), in pairs of tokens.
  const auto compute = [](const char* node) {
    const std::string groups = std::string(R"(cluster.groups=[{"node": ")") + node + R"(", "nodes": 2}])";
    return run({groups}, Fidelity::Analytical).breakdown.compute_s;
  };
  const double h100 = compute("dgx-h100"), a100 = compute("dgx-a100");
  REQUIRE(a100 > 1.5 * h100);
  const double hand = 32768 * a100 / (a100 + h100);
  const JobReport by_speed = run({R"(parallel.cp_shares="auto")"}, Fidelity::Analytical);
  CHECK(by_speed.cp_shares[0] == doctest::Approx(hand).epsilon(0.02));
}

TEST_CASE("bad CP shares are input errors at their JSON pointer") {
  auto errors = [](const std::vector<std::string>& sets) { return testing::errors_of(kMixedCp, sets); };
  CHECK(errors({"parallel.cp_shares=[20480, 12288]"}).empty());
  CHECK(errors({"parallel.cp_shares=[20480, 12290]"}).find("/parallel/cp_shares: the shares sum to 32770 tokens") !=
        std::string::npos);
  CHECK(errors({"parallel.cp_shares=[32768]"}).find("/parallel/cp_shares: expected one token count per CP rank") !=
        std::string::npos);
  CHECK(errors({"parallel.cp_shares=[20481, 12287]"}).find("/parallel/cp_shares/0: expected an even token count") !=
        std::string::npos);
  CHECK(errors({"parallel.cp_shares=[32768, 0]"}).find("/parallel/cp_shares/1: expected a token count") !=
        std::string::npos);
  CHECK(errors({R"(parallel.cp_shares="fast")"}).find("/parallel/cp_shares: expected \"even\", \"auto\"") !=
        std::string::npos);
  // Ulysses takes uneven sequence shares too (tests/test_head_shares.cpp); hybrid CP does not.
  CHECK(errors({R"(parallel.cp_shares="auto")", R"(parallel.cp_kind="ulysses")"}).empty());
  CHECK(errors({R"(parallel.cp_shares="auto")", "parallel.tp=4", "parallel.cp=4", R"(parallel.cp_kind="hybrid")",
                "parallel.cp_ulysses=2"})
            .find("/parallel/cp_shares: uneven sequence shares are modelled for a ring or Ulysses") !=
        std::string::npos);
  CHECK(errors({R"(parallel.cp_shares="auto")", "parallel.cp=1", "parallel.dp=2"})
            .find("/parallel/cp_shares: uneven sequence shares need cp >= 2") != std::string::npos);
  CHECK(errors({R"(parallel.cp_shares="auto")", R"(parallel.dp_shares="balanced")"})
            .find("/parallel/cp_shares: uneven sequence shares together with parallel.dp_shares") != std::string::npos);
  // Uneven shares need not divide seq_len evenly by cp.
  CHECK(errors({"training.seq_len=32770", "parallel.cp_shares=[20482, 12288]"}).empty());
}
