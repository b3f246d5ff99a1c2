// PipeDream's asynchronous pipelines (models/pipedream.hpp): no flush, the
// stashed weight versions in the memory column, the staleness reported.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "scenario_fixtures.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

// GPT-3 1.3B (24 layers, 6 per stage) on one DGX A100: tp 2, pp 4, 8 micro-batches.
const char* kScenario = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 1},
  "parallel": {"tp": 2, "pp": 4, "dp": 1, "micro_batch": 1, "global_batch": 8},
  "training": {"seq_len": 2048}
})";

JobReport run(const std::vector<std::string>& sets) {
  return simulate(load_scenario_text(kScenario, "s.json", "", sets, testing::catalog()));
}

}  // namespace

TEST_CASE("pipedream: weight versions stashed per stage and the staleness, in the memory column and the report") {
  const JobReport base = run({"parallel.schedule=\"1f1b\""});
  const JobReport stash = run({"parallel.schedule=\"pipedream\""});
  const JobReport two = run({"parallel.schedule=\"pipedream-2bw\""});
  REQUIRE(base.feasible);
  REQUIRE(stash.feasible);
  REQUIRE(two.feasible);
  const int p = 4;
  for (int i = 0; i < p; ++i) {
    CAPTURE(i);
    const StageReport& b = base.per_stage[i];
    // PipeDream: one version per micro-batch in flight on stage i (p - i),
    // PipeDream-2BW: two; activations in flight as 1F1B's (p - i micro-batches).
    CHECK(stash.per_stage[i].memory.weights == doctest::Approx((p - i) * b.memory.weights));
    CHECK(two.per_stage[i].memory.weights == doctest::Approx(2 * b.memory.weights));
    CHECK(stash.per_stage[i].memory.activations == b.memory.activations);
    CHECK(two.per_stage[i].memory.activations == b.memory.activations);
    CHECK(stash.per_stage[i].weight_versions == p - i);
    CHECK(stash.per_stage[i].weight_staleness == p - 1 - i);
    CHECK(two.per_stage[i].weight_versions == 2);
    CHECK(two.per_stage[i].weight_staleness == 1);
    CHECK(b.weight_staleness == 0);
  }
  const nlohmann::json j = to_json(stash);
  CHECK(j["per_stage"][0]["weight_staleness"] == 3);
  CHECK(j["per_stage"][0]["weight_versions"] == 4);
  CHECK(summary_text(two).find("staleness (optimizer steps): 1 1 1 1") != std::string::npos);
  CHECK(!to_json(base)["per_stage"][0].contains("weight_staleness"));
}

TEST_CASE("pipedream: the steady state has no bubble; PipeDream steps after every micro-batch") {
  const JobReport flushed = run({"parallel.schedule=\"1f1b\""});
  const JobReport two = run({"parallel.schedule=\"pipedream-2bw\""});
  const JobReport stash = run({"parallel.schedule=\"pipedream\""});
  REQUIRE(two.feasible);
  // One iteration alone is 1F1B's (the same units and one optimizer step).
  CHECK(two.single_iteration_s == flushed.iteration_time_s);
  // The period: 1F1B's busiest stage without its bubble, about m (T_F + T_B)
  // against 1F1B's (m + p - 1)(T_F + T_B): (p - 1) / m = 3/8 longer, less the
  // optimizer step both share and the stages' unequal embedding and head.
  const double gain = flushed.iteration_time_s / two.iteration_time_s - 1;
  CHECK(gain > 0.25);
  CHECK(gain < 3.0 / 8.0);
  double busiest = 0;
  for (const StageReport& s : flushed.per_stage) {
    double own = s.time.compute_s;
    for (double c : s.time.exposed_comm_s) own += c;
    busiest = std::max(busiest, own);
  }
  CHECK(two.iteration_time_s == doctest::Approx(busiest).epsilon(1e-9));
  // PipeDream: the same units, m optimizer steps per iteration instead of one.
  CHECK(stash.iteration_time_s > two.iteration_time_s);
}

TEST_CASE("pipedream: what its steady state needs and what is not modelled are input errors") {
  CHECK(testing::errors_of(kScenario, {"parallel.schedule=\"pipedream\"", "parallel.global_batch=2"})
            .find("/parallel/global_batch: pipedream needs at least pp = 4 micro-batches per replica (its steady "
                  "state), found 2") != std::string::npos);
  CHECK(testing::errors_of(kScenario, {"parallel.schedule=\"pipedream\"", "parallel.tp=1", "parallel.dp=2",
                                       "parallel.global_batch=16"})
            .find("/parallel/dp: pipedream updates the weights after every micro-batch") != std::string::npos);
  CHECK(testing::errors_of(kScenario, {"parallel.schedule=\"pipedream-2bw\"",
                                       "training.optimizer_sync=\"post-"
                                       "validation\""})
            .find("/training/optimizer_sync: pipedream-2bw has no synchronous optimizer step") != std::string::npos);
  CHECK(testing::errors_of(kScenario, {"parallel.schedule=\"pipedream-2bw\"", "parallel.tp=1", "parallel.dp=2",
                                       "parallel.global_batch=16"}) == "");
}
