// DeepSpeed's TrainSchedule in scenarios (docs/schedules.md, docs/frameworks.md):
// the default with "framework": "deepspeed" and PP > 1, an explicit schedule
// kept, the blocking send/recv it implies, and a run at both fidelities.
#include <doctest/doctest.h>

#include <string>

#include "scenario_fixtures.hpp"
#include "tools/frontend/job.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// GPT-3 1.3B over two DGX A100, one pipeline stage per node: the stage
// boundary crosses the network.
const char* kDeepSpeed = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 2},
  "parallel": {"tp": 8, "pp": 2, "micro_batch": 2, "global_batch": 16},
  "training": {"seq_len": 2048, "precision": "bf16", "framework": "deepspeed"}
})";

Scenario load(const std::string& text, const std::vector<std::string>& sets = {}) {
  return load_scenario_text(text, "ds.json", "", sets, catalog());
}

}  // namespace

TEST_CASE("framework deepspeed with pipeline stages runs DeepSpeed's TrainSchedule by default") {
  const Scenario s = load(kDeepSpeed);
  CHECK(s.parallel.schedule == ScheduleKind::DeepSpeed1F1B);
  CHECK_FALSE(s.parallel.pp_overlap);  // the engine's send and recv are blocking
  // One stage: nothing to schedule, the plain default.
  CHECK(load(kDeepSpeed, {"parallel.pp=1", "parallel.dp=2"}).parallel.schedule == ScheduleKind::OneFOneB);
  // An explicit schedule is kept; the legacy order by name.
  CHECK(load(kDeepSpeed, {R"(parallel.schedule="1f1b")", "parallel.pp_overlap=false"}).parallel.schedule ==
        ScheduleKind::OneFOneB);
  CHECK(load(kDeepSpeed, {R"(parallel.schedule="deepspeed-1f1b-legacy")"}).parallel.schedule ==
        ScheduleKind::DeepSpeed1F1BLegacy);
  // Without the framework the default stays 1F1B.
  CHECK(load(replace(kDeepSpeed, R"(, "framework": "deepspeed")", "")).parallel.schedule == ScheduleKind::OneFOneB);
}

TEST_CASE("DeepSpeed's TrainSchedule refuses overlapped send/recv") {
  const std::string e = errors_of(kDeepSpeed, {"parallel.pp_overlap=true"});
  CHECK(e.find("/parallel/pp_overlap") != std::string::npos);
  CHECK(e.find("deepspeed-1f1b") != std::string::npos);
  CHECK(e.find("blocking") != std::string::npos);
}

TEST_CASE("DeepSpeed's TrainSchedule runs at both fidelities, slower than 1F1B's blocking sends") {
  for (Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    const std::string fidelity = to_string(f);
    CAPTURE(fidelity);
    const JobReport ds = simulate(load(kDeepSpeed), f);
    const JobReport one = simulate(load(kDeepSpeed, {R"(parallel.schedule="1f1b")", "parallel.pp_overlap=false"}), f);
    REQUIRE(ds.feasible);
    REQUIRE(one.feasible);
    // The same passes (kernels beside a transfer run slightly slower, at the
    // profile's compute share, and the transfers overlap other kernels);
    // the transfers are serialised in each step.
    CHECK(ds.iteration_time_s > one.iteration_time_s);
    CHECK(ds.breakdown.compute_s == doctest::Approx(one.breakdown.compute_s).epsilon(1e-3));
    CHECK(ds.iteration_time_s < 1.25 * one.iteration_time_s);
  }
}
