// The scenario's fault sections: "perturbations" (slow GPUs inside an
// iteration) and "reliability" (failures over the job's life), read at the
// edge with exact errors, simulated, and reported in the summary and the JSON.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "scenario_fixtures.hpp"
#include "sim/cost_model.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

// GPT-3 1.3B on 16 A100.
const char* kScenario = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 2},
  "parallel": {"tp": 2, "pp": 2, "dp": 4, "micro_batch": 1, "global_batch": 16},
  "training": {"seq_len": 2048}
})";

Scenario load(const std::vector<std::string>& sets) {
  return load_scenario_text(kScenario, "s.json", "", sets, testing::catalog());
}

std::string errors_of(const std::vector<std::string>& sets) { return testing::errors_of(kScenario, sets); }

}  // namespace

TEST_CASE("reliability section: defaults, results in the report and the JSON") {
  const Scenario s = load({R"(reliability={"duration": "30d", "seed": 7})"});
  REQUIRE(s.reliability);
  CHECK(s.reliability->duration_s == 30 * 86400.0);
  CHECK(s.reliability->components.size() == llama3_failure_rates().size());
  CHECK(s.reliability->checkpoint_mode == CheckpointMode::Synchronous);
  // 2 TB/s for 16,384 GPUs, the share of 16.
  CHECK(s.reliability->storage_bandwidth == doctest::Approx(2e12 * 16 / 16384));
  const JobReport r = simulate(s);
  REQUIRE(r.reliability);
  const ReliabilityReport& f = *r.reliability;
  CHECK(f.checkpoint_bytes == doctest::Approx(s.model.total_params() * 14));
  CHECK(f.checkpoint_interval_s > 0);
  CHECK(f.ettr_mean > 0.5);
  CHECK(f.ettr_mean < 1);
  CHECK(f.goodput_units_per_s == doctest::Approx(r.tokens_per_s * f.ettr_mean));
  const nlohmann::json j = to_json(r);
  CHECK(j["reliability"]["ettr"].get<double>() == f.ettr_mean);
  CHECK(j["reliability"]["by_component"].size() == f.by_component.size());
  CHECK(summary_text(r).find("effective training time") != std::string::npos);
  CHECK(metric_value(r, "ettr") == f.ettr_mean);
  // Without the section there is no failure model.
  CHECK(!simulate(load({})).reliability);
}

TEST_CASE("reliability section: own rates, spares and checkpoint modes") {
  const Scenario s = load({R"(reliability={"duration": "7d", "failure_rates": [
      {"component": "node", "per": "node", "per_day": 0.01},
      {"component": "software", "per": "job", "per_day": 0.5, "takes_node_out": false}],
      "planned_per_day": 0, "spare_nodes": 1, "repair_time": "12h",
      "checkpoint": {"mode": "in-memory", "interval": "30min"}})"});
  REQUIRE(s.reliability);
  CHECK(s.reliability->components.size() == 2);
  CHECK(s.reliability->components[1].scope == FailureScope::Job);
  CHECK(!s.reliability->components[1].takes_node_out);
  CHECK(s.reliability->spare_nodes == 1);
  CHECK(s.reliability->repair_s == 12 * 3600.0);
  CHECK(s.reliability->checkpoint_interval_s == 1800);
  // In-memory copies go to a peer over the node's NICs (a DGX A100: 8 x 200 Gb/s for 8 GPUs).
  CHECK(s.reliability->snapshot_bandwidth == doctest::Approx(25e9));
  const JobReport r = simulate(s);
  REQUIRE(r.reliability);
  CHECK(r.reliability->unexpected_expected == doctest::Approx(7 * (2 * 0.01 + 0.5)));
}

TEST_CASE("reliability section: bad input names the key") {
  CHECK(errors_of({R"(reliability={})"}).find("/reliability/duration: required") != std::string::npos);
  CHECK(errors_of({R"(reliability={"duration": 54})"}).find("/reliability/duration") != std::string::npos);
  CHECK(errors_of({R"(reliability={"duration": "54d", "checkpoint": {"mode": "async"}})"})
            .find("/reliability/checkpoint/snapshot_bandwidth") != std::string::npos);
  CHECK(errors_of({R"(reliability={"duration": "54d", "repair_time": "1d"})"}).find("/reliability/repair_time") !=
        std::string::npos);
  CHECK(errors_of({R"(reliability={"duration": "54d", "spare_nodes": 4})"}).find("/reliability/repair_time") !=
        std::string::npos);
  CHECK(errors_of({R"(reliability={"duration": "54d", "failure_rates": [{"component": "x", "per": "rack",
      "per_day": 1}]})"})
            .find("/reliability/failure_rates/0/per") != std::string::npos);
  CHECK(errors_of({R"(reliability={"duration": "54d", "checkpoints": {}})"}).find("/reliability/checkpoints") !=
        std::string::npos);
  CHECK(errors_of({R"(reliability={"duration": "54d", "failure_rates": "weibull"})"})
            .find("/reliability/failure_rates") != std::string::npos);
}

TEST_CASE("reliability section: a Monte Carlo too large for the bound is refused, not run") {
  const Scenario s = load({R"(reliability={"duration": "3000d", "trials": 100000, "checkpoint": {"interval": "1s"}})"});
  CHECK_THROWS_AS(simulate(s), InputError);
}

namespace {
// 1,024 A100 in data parallel, gradients all-reduced after the backward (no overlap).
const char* kDataParallel = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 128},
  "parallel": {"tp": 1, "pp": 1, "dp": 1024, "micro_batch": 2, "global_batch": 2048, "dp_overlap": false},
  "training": {"seq_len": 2048}
})";
}  // namespace

TEST_CASE("one GPU at half speed in a 1,024-GPU synchronous job costs its compute again, at both fidelities") {
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    const Scenario clean = load_scenario_text(kDataParallel, "dp.json", "", {}, testing::catalog());
    const Scenario slowed = load_scenario_text(
        kDataParallel, "dp.json", "", {R"(perturbations={"gpus": [{"gpu": 517, "slowdown": 2}]})"}, testing::catalog());
    REQUIRE(slowed.cluster.slowdowns.size() == 1);
    const JobReport a = simulate(clean, f);
    const JobReport b = simulate(slowed, f);
    // Every replica waits for GPU 517 at the all-reduce: the iteration grows by
    // that GPU's compute time once more.
    CHECK(b.iteration_time_s - a.iteration_time_s == doctest::Approx(a.breakdown.compute_s).epsilon(0.02));
    REQUIRE(b.perturbations);
    CHECK(b.perturbations->unperturbed_iteration_time_s == a.iteration_time_s);
    CHECK(b.perturbations->lost_s == doctest::Approx(b.iteration_time_s - a.iteration_time_s));
    CHECK(b.perturbations->slowest_rank.find("gpu 517") != std::string::npos);
    CHECK(b.perturbations->max_slowdown == 2);
  }
}

TEST_CASE("the expected slowest of n GPUs lies E[max of n standard normals] spreads beyond the median") {
  CHECK(expected_max_of_normals(1) == 0);
  CHECK(expected_max_of_normals(2) == doctest::Approx(0.5641896).epsilon(1e-6));  // 1 / sqrt(pi)
  CHECK(expected_max_of_normals(3) == doctest::Approx(0.8462844).epsilon(1e-6));  // 3 / (2 sqrt(pi))
  CHECK(expected_max_of_normals(10) == doctest::Approx(1.5387527).epsilon(1e-6));
  CHECK(expected_max_of_normals(100) == doctest::Approx(2.5075939).epsilon(1e-6));
  // The figures docs/calibration.md ("Slowest GPU") and docs/validation.md quote.
  CHECK(expected_max_of_normals(8) == doctest::Approx(1.42).epsilon(0.005));
  CHECK(expected_max_of_normals(64) == doctest::Approx(2.34).epsilon(0.005));
  CHECK(expected_max_of_normals(128) == doctest::Approx(2.59).epsilon(0.005));
  CHECK(expected_max_of_normals(3072) == doctest::Approx(3.55).epsilon(0.005));
  CHECK(expected_max_of_normals(1024) == doctest::Approx(3.25).epsilon(0.005));
  CHECK(expected_max_of_normals(16384) == doctest::Approx(3.97).epsilon(0.005));
  double previous = 0;
  for (long n = 2; n <= (1L << 20); n *= 4) {
    const double z = expected_max_of_normals(n);
    CHECK(z > previous);
    previous = z;
  }
  CHECK(previous < 5.0);  // about 4.9 at 2^20
}

TEST_CASE("every GPU of a synchronous job waits for its slowest: the profile's spread, or the cluster's") {
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    // 1,024 A100 in data parallel, gradients reduced after the backward: every kernel
    // runs at the slowest GPU's pace, so compute grows by exactly the factor.
    const Scenario spread = load_scenario_text(kDataParallel, "dp.json", "", {}, testing::catalog());
    const Scenario none =
        load_scenario_text(kDataParallel, "dp.json", "", {"cluster.gpu_speed_spread=0"}, testing::catalog());
    const Scenario wide =
        load_scenario_text(kDataParallel, "dp.json", "", {"cluster.gpu_speed_spread=0.05"}, testing::catalog());
    REQUIRE(none.cluster.gpu_speed_spread == 0.0);
    const JobReport a = simulate(spread, f);
    const JobReport b = simulate(none, f);
    const JobReport c = simulate(wide, f);
    const double sigma = spread.profiles.front().gpu_speed_spread.value;
    CHECK(sigma > 0.01);  // the shipped A100 profile's figure (docs/calibration.md)
    REQUIRE(a.slowest_gpus.size() == 1);
    CHECK(a.slowest_gpus[0].gpu == "A100-SXM4-80GB");
    CHECK(a.slowest_gpus[0].gpus == 1024);
    CHECK(a.slowest_gpus[0].spread == sigma);
    const double factor = 1 + sigma * expected_max_of_normals(1024);
    CHECK(a.slowest_gpus[0].factor == doctest::Approx(factor));
    CHECK(b.slowest_gpus.empty());
    CHECK(a.breakdown.compute_s / b.breakdown.compute_s == doctest::Approx(factor).epsilon(1e-6));
    CHECK(c.breakdown.compute_s / b.breakdown.compute_s ==
          doctest::Approx(1 + 0.05 * expected_max_of_normals(1024)).epsilon(1e-6));
    CHECK(a.iteration_time_s > b.iteration_time_s);
    CHECK(c.iteration_time_s > a.iteration_time_s);
  }
  // One GPU waits for no other.
  const JobReport one = simulate(load_scenario_text(R"({
    "model": "gpt3-1.3b", "cluster": {"node": {"preset": "dgx-a100", "gpus_per_node": 1}, "nodes": 1},
    "parallel": {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1}, "training": {"seq_len": 2048}})",
                                                    "one.json", "", {}, testing::catalog()));
  CHECK(one.slowest_gpus.empty());
  CHECK(testing::errors_of(kDataParallel, {"cluster.gpu_speed_spread=0.5"}).find("/cluster/gpu_speed_spread") !=
        std::string::npos);
  CHECK(testing::errors_of(kDataParallel, {"cluster.gpu_speed_spread=-0.01"}).find("/cluster/gpu_speed_spread") !=
        std::string::npos);
}

TEST_CASE("perturbations: nodes, seeded stragglers and bad input") {
  const Scenario s =
      load({R"(perturbations={"nodes": [{"node": 1, "slowdown": 1.5}], "gpus": [{"gpu": 8, "slowdown": 2}]})"});
  REQUIRE(s.cluster.slowdowns.size() == 8);  // node 1 holds GPUs 8-15
  CHECK(s.cluster.slowdowns.front().gpu == 8);
  CHECK(s.cluster.slowdowns.front().factor == 3);  // both entries apply
  CHECK(s.cluster.slowdowns.back().factor == 1.5);
  const char* stragglers = R"(perturbations={"stragglers": {"count": 3, "slowdown": [1.1, 1.3], "seed": 5}})";
  const Scenario a = load({stragglers});
  const Scenario b = load({stragglers});
  REQUIRE(a.cluster.slowdowns.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(a.cluster.slowdowns[i].gpu == b.cluster.slowdowns[i].gpu);
    CHECK(a.cluster.slowdowns[i].factor == b.cluster.slowdowns[i].factor);
    CHECK(a.cluster.slowdowns[i].factor >= 1.1);
    CHECK(a.cluster.slowdowns[i].factor <= 1.3);
  }
  CHECK(simulate(a).iteration_time_s > simulate(load({})).iteration_time_s);
  CHECK(errors_of({R"(perturbations={"gpus": [{"gpu": 16, "slowdown": 2}]})"}).find("/perturbations/gpus/0/gpu") !=
        std::string::npos);
  CHECK(
      errors_of({R"(perturbations={"gpus": [{"gpu": 1, "slowdown": 0.5}]})"}).find("/perturbations/gpus/0/slowdown") !=
      std::string::npos);
  CHECK(errors_of({R"(perturbations={"stragglers": {"slowdown": 1.2}})"}).find("/perturbations/stragglers") !=
        std::string::npos);
  // Each slowed GPU may be a GPU type of its own: their number is bounded (docs/limits.md).
  const std::string many = testing::errors_of(
      R"({"model": "gpt3-1.3b", "cluster": {"node": "dgx-a100", "nodes": 8200},
          "parallel": {"tp": 8, "pp": 1, "dp": 8200, "micro_batch": 1, "global_batch": 8200},
          "training": {"seq_len": 2048}, "perturbations": {"stragglers": {"fraction": 1, "slowdown": [1, 2]}}})");
  CHECK(many.find("/perturbations: slows 65600 GPUs, above the limit of 65536") != std::string::npos);
  CHECK(errors_of({R"(perturbations={"stragglers": {"count": 2}})"}).find("/perturbations/stragglers/slowdown") !=
        std::string::npos);
}

TEST_CASE("the Llama 3 example: interruptions and effective training time within the published figures") {
  // Llama 3 (arXiv:2407.21783, section 3.3.4): 466 interruptions in 54 days, effective training time above 90%.
  const std::string path =
      std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/examples/llama3.1-405b-16384xh100-failures.json";
  const Scenario s = load_scenario_file(path, {}, testing::catalog());
  const JobReport r = simulate(s);
  REQUIRE(r.reliability);
  CHECK(r.reliability->interruptions_mean == doctest::Approx(466).epsilon(0.2));
  CHECK(r.reliability->ettr_mean > 0.90);
  CHECK(r.reliability->ettr_mean < 1.0);
}

TEST_CASE("a degraded spine link shows up in the breakdown at both fidelities; a window is flow fidelity's alone") {
  // 8 DGX H100 under 4 leaf groups of 2 nodes and one spine: the gradient
  // all-reduce of 64 ranks crosses the spine.
  const char* spine = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-h100", "nodes": 8,
                "fabric": {"kind": "rail-optimized", "nodes_per_leaf": 2, "spines": 1}},
    "parallel": {"tp": 1, "pp": 1, "dp": 64, "micro_batch": 2, "global_batch": 128, "dp_overlap": false},
    "training": {"seq_len": 2048}
  })";
  auto load_spine = [&](const std::vector<std::string>& sets) {
    return load_scenario_text(spine, "spine.json", "", sets, testing::catalog());
  };
  const char* quarter =
      R"(perturbations={"links": [{"from": "leaf rail 0 group 0", "to": "spine 0", "capacity": 0.25}]})";
  const JobReport clean = simulate(load_spine({}), Fidelity::Flow);
  const JobReport degraded = simulate(load_spine({quarter}), Fidelity::Flow);
  const auto dp = static_cast<std::size_t>(CommClass::DP);
  CHECK(degraded.breakdown.exposed_comm_s[dp] > clean.breakdown.exposed_comm_s[dp] * 1.2);
  REQUIRE(degraded.perturbations);
  CHECK(degraded.perturbations->degraded_links == 1);
  CHECK(degraded.perturbations->lost_s == doctest::Approx(degraded.iteration_time_s - clean.iteration_time_s));
  // Degraded only after the iteration's compute: the same as not degraded.
  const JobReport late = simulate(
      load_spine({R"(perturbations={"links": [{"from": "spine 0", "to": "leaf rail 0 group 0", "capacity": 0.25,
                   "start": "10s"}]})"}),
      Fidelity::Flow);
  CHECK(late.iteration_time_s == clean.iteration_time_s);
  // The analytical model times every communicator crossing the link at its
  // lower capacity: the exposed all-reduce grows there too.
  const JobReport clean_a = simulate(load_spine({}), Fidelity::Analytical);
  const JobReport degraded_a = simulate(load_spine({quarter}), Fidelity::Analytical);
  CHECK(degraded_a.breakdown.exposed_comm_s[dp] > clean_a.breakdown.exposed_comm_s[dp] * 1.2);
  REQUIRE(degraded_a.perturbations);
  CHECK(degraded_a.perturbations->lost_s > 0);
  // It has no time within a transfer: a window is flow fidelity's alone.
  std::string windowed;
  try {
    simulate(load_spine({R"(perturbations={"links": [{"from": "spine 0", "to": "leaf rail 0 group 0",
                            "capacity": 0.25, "start": "10s"}]})"}),
             Fidelity::Analytical);
  } catch (const InputError& e) {
    windowed = e.what();
  }
  CHECK(windowed.find("/perturbations/links/0") != std::string::npos);
  CHECK(windowed.find("--fidelity flow") != std::string::npos);
  CHECK_THROWS_AS(
      simulate(load_spine({R"(perturbations={"links": [{"from": "leaf 9", "to": "spine 0", "capacity": 0.5}]})"}),
               Fidelity::Flow),
      InputError);
}

TEST_CASE("adaptive routing: degraded up-links take their share of the leaf's bundle, at both fidelities") {
  // 8 DGX H100, 2 nodes per leaf, 2:1 oversubscribed: a leaf's up-links carry
  // 400 Gb/s, the one NIC whose ring channel leaves it. Over 4 spines with
  // adaptive routing they are one bundle; two of its four links at a tenth
  // of their capacity leave 0.55 of it, what one spine's single link at 0.55 leaves.
  auto load = [&](int spines, const std::string& links) {
    const std::string text = R"({
      "model": "gpt3-1.3b",
      "cluster": {"node": "dgx-h100", "nodes": 8,
                  "fabric": {"nodes_per_leaf": 2, "oversubscription": 2, "routing": "adaptive", "spines": )" +
                             std::to_string(spines) + R"(}},
      "parallel": {"tp": 1, "pp": 1, "dp": 64, "micro_batch": 2, "global_batch": 128, "dp_overlap": false},
      "training": {"seq_len": 2048},
      "perturbations": {"links": )" +
                             links +
                             R"(}
    })";
    return load_scenario_text(text, "ar.json", "", {}, testing::catalog());
  };
  const std::string two_tenths = R"([{"from": "leaf rail 0 group 0", "to": "spine 1", "capacity": 0.1},
                                      {"from": "spine 2", "to": "leaf rail 0 group 0", "capacity": 0.1}])";
  const std::string remaining = R"([{"from": "leaf rail 0 group 0", "to": "spine 0", "capacity": 0.55}])";
  for (const Fidelity fidelity : {Fidelity::Flow, Fidelity::Analytical}) {
    CAPTURE(static_cast<int>(fidelity));
    const JobReport bundle = simulate(load(4, two_tenths), fidelity);
    const JobReport single = simulate(load(1, remaining), fidelity);
    REQUIRE(bundle.perturbations);
    CHECK(bundle.perturbations->lost_s > 0);
    CHECK(Time::seconds(bundle.iteration_time_s).count_ns() == Time::seconds(single.iteration_time_s).count_ns());
    CHECK(bundle.perturbations->lost_s == doctest::Approx(single.perturbations->lost_s));
  }
  // A spine that is not there is still an error.
  CHECK_THROWS_AS(
      simulate(load(4, R"([{"from": "leaf rail 0 group 0", "to": "spine 4", "capacity": 0.5}])"), Fidelity::Flow),
      InputError);
}

namespace {
// The analytical makespan and simulated ranks of a scenario, planned with one
// rank per equivalence class or with every rank.
std::pair<double, std::size_t> simulated_makespan(const Scenario& s, bool representatives) {
  Platform platform(s.cluster, s.profiles);
  PlanOptions opts;
  opts.representatives = representatives;
  const WorkloadPlan plan = workload_of(s)->plan(platform, Placement::of(s.parallel), opts);
  const std::unique_ptr<NetworkModel> network = platform.network_model(Fidelity::Analytical);
  Executor exec(plan.setup, platform.cluster(), platform.costs(), *network);
  const SimulationResult r = exec.run();
  REQUIRE(r.completed);
  return {r.makespan.to_seconds(), plan.setup.ranks.size()};
}
}  // namespace

TEST_CASE("stragglers in TP groups: one rank per group at its slowest member's pace, as simulating every rank") {
  // 64 H100: TP 8, PP 2, DP 4, with 3 seeded stragglers.
  const char* tp = R"({
    "model": "gpt3-6.7b",
    "cluster": {"node": "dgx-h100", "nodes": 8},
    "parallel": {"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "global_batch": 32},
    "training": {"seq_len": 2048},
    "perturbations": {"stragglers": {"count": 3, "slowdown": [1.2, 1.5], "seed": 11}}
  })";
  const Scenario s = load_scenario_text(tp, "tp.json", "", {}, testing::catalog());
  REQUIRE(s.cluster.slowdowns.size() == 3);
  const auto [every, every_ranks] = simulated_makespan(s, false);
  const auto [compact, compact_ranks] = simulated_makespan(s, true);
  CHECK(every_ranks == 64);
  CHECK(compact_ranks <= 8);  // at most one rank per (stage, replica)
  CHECK(compact == doctest::Approx(every).epsilon(0.005));
  CHECK(compact >
        simulate(load_scenario_text(tp, "tp.json", "", {"perturbations={}"}, testing::catalog())).iteration_time_s);
}

namespace {
// One H100 runs GPT-3 1.3B alone: the iteration is its compute, nothing to wait for.
const char* kOneGpu = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": {"preset": "dgx-h100", "gpus_per_node": 1}, "nodes": 1},
  "parallel": {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 4},
  "training": {"seq_len": 2048}
})";

std::string window(int gpu, double slowdown, double start_s, double end_s) {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                R"(perturbations={"gpus": [{"gpu": %d, "slowdown": %g, "start": "%.9fs", "end": "%.9fs"}]})", gpu,
                slowdown, start_s, end_s);
  return buf;
}
}  // namespace

TEST_CASE("a slowdown window: kernels run slower only while it lasts, re-timed when it opens and closes") {
  const JobReport clean = simulate(load_scenario_text(kOneGpu, "one.json", "", {}, testing::catalog()));
  const double c = clean.iteration_time_s;
  REQUIRE(c > 0);
  // 2x over the first half of the iteration: half of that half's work is done
  // in it, the rest at full speed after, so the iteration takes c + c/4.
  const Scenario half = load_scenario_text(kOneGpu, "one.json", "", {window(0, 2, 0, c / 2)}, testing::catalog());
  REQUIRE(half.cluster.slowdowns.size() == 1);
  CHECK(half.cluster.slowdowns[0].factor == 1);
  REQUIRE(half.cluster.slowdowns[0].windows.size() == 1);
  CHECK(simulate(half).iteration_time_s == doctest::Approx(1.25 * c).epsilon(1e-6));
  // A window in the middle: c + (window length) / 2 for a factor of 2.
  const Scenario middle = load_scenario_text(kOneGpu, "one.json", "", {window(0, 2, c / 4, c / 2)}, testing::catalog());
  CHECK(simulate(middle).iteration_time_s == doctest::Approx(c + c / 8).epsilon(1e-6));
  // A window after the iteration changes nothing; one without an end is a static slowdown.
  CHECK(simulate(load_scenario_text(kOneGpu, "one.json", "", {window(0, 3, 2 * c, 3 * c)}, testing::catalog()))
            .iteration_time_s == c);
  const JobReport open = simulate(load_scenario_text(
      kOneGpu, "one.json", "", {R"(perturbations={"gpus": [{"gpu": 0, "slowdown": 2, "start": "0s"}]})"},
      testing::catalog()));
  CHECK(open.iteration_time_s == doctest::Approx(2 * c).epsilon(1e-6));
  REQUIRE(open.perturbations);
  CHECK(open.perturbations->max_slowdown == 2);
  // Bad windows name the entry.
  CHECK(testing::errors_of(kOneGpu, {window(0, 2, 1, 0.5)}).find("/perturbations/gpus/0/end") != std::string::npos);
}

TEST_CASE("a slowdown window on one GPU of a 1,024-GPU job costs the work it slowed, at both fidelities") {
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    const JobReport a = simulate(load_scenario_text(kDataParallel, "dp.json", "", {}, testing::catalog()), f);
    const double c = a.breakdown.compute_s;
    // 2x over the GPU's whole compute: it does half of it inside the window and
    // the other half after, c / 2 late at the all-reduce every replica waits on.
    const JobReport b =
        simulate(load_scenario_text(kDataParallel, "dp.json", "", {window(517, 2, 0, c)}, testing::catalog()), f);
    CHECK(b.iteration_time_s - a.iteration_time_s == doctest::Approx(c / 2).epsilon(0.02));
    REQUIRE(b.perturbations);
    CHECK(b.perturbations->slowest_rank.find("gpu 517") != std::string::npos);
  }
}

TEST_CASE("perturbations: the time each entry costs on its own") {
  const Scenario s = load({R"(perturbations={"gpus": [{"gpu": 8, "slowdown": 2}, {"gpu": 3, "slowdown": 1.2}]})"});
  REQUIRE(s.perturbation_sources.size() == 2);
  const JobReport r = simulate(s);
  REQUIRE(r.perturbations);
  const PerturbationReport& p = *r.perturbations;
  REQUIRE(p.each.size() == 2);
  CHECK(p.each[0].pointer == "/perturbations/gpus/0");
  CHECK(p.each[1].pointer == "/perturbations/gpus/1");
  CHECK(p.each[0].lost_s > p.each[1].lost_s);
  CHECK(p.each[1].lost_s > 0);
  // An entry's cost is the job with that entry alone.
  const JobReport alone = simulate(load({R"(perturbations={"gpus": [{"gpu": 3, "slowdown": 1.2}]})"}));
  CHECK(p.each[1].lost_s == doctest::Approx(alone.perturbations->lost_s));
  // Both slow the same job, whose pace the slower sets; the total is at least the larger.
  CHECK(p.lost_s >= p.each[0].lost_s * 0.999);
  CHECK(to_json(r)["perturbations"]["each"].size() == 2);
  CHECK(summary_text(r).find("/perturbations/gpus/1 alone") != std::string::npos);
}

TEST_CASE("a slowdown window inside a TP group: the group runs every member, as simulating every rank") {
  const char* tp = R"({
    "model": "gpt3-6.7b",
    "cluster": {"node": "dgx-h100", "nodes": 4},
    "parallel": {"tp": 8, "pp": 2, "dp": 2, "micro_batch": 1, "global_batch": 16},
    "training": {"seq_len": 2048},
    "perturbations": {"gpus": [{"gpu": 3, "slowdown": 3, "start": "0.05s", "end": "0.4s"}]}
  })";
  const Scenario s = load_scenario_text(tp, "tp.json", "", {}, testing::catalog());
  const double every = simulated_makespan(s, false).first;
  CHECK(simulated_makespan(s, true).first == doctest::Approx(every).epsilon(0.005));
  CHECK(every >
        simulate(load_scenario_text(tp, "tp.json", "", {"perturbations={}"}, testing::catalog())).iteration_time_s);
}

TEST_CASE("a NIC at half speed: the all-reduce of every communicator through it slows, at both fidelities") {
  // 16 A100 in data parallel over 2 nodes: the ring all-reduce crosses the NICs.
  const char* dp = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 2},
    "parallel": {"tp": 1, "pp": 1, "dp": 16, "micro_batch": 1, "global_batch": 16, "dp_overlap": false},
    "training": {"seq_len": 2048}
  })";
  const auto index = static_cast<std::size_t>(CommClass::DP);
  for (const Fidelity f : {Fidelity::Analytical, Fidelity::Flow}) {
    CAPTURE(to_string(f));
    const JobReport clean = simulate(load_scenario_text(dp, "dp.json", "", {}, testing::catalog()), f);
    const Scenario s = load_scenario_text(
        dp, "dp.json", "",
        {R"(perturbations={"links": [{"from": "nic 0 of node 1", "to": "leaf rail 0 group 0", "capacity": 0.5}]})"},
        testing::catalog());
    const JobReport slow = simulate(s, f);
    CHECK(slow.breakdown.exposed_comm_s[index] > clean.breakdown.exposed_comm_s[index] * 1.2);
    CHECK(slow.iteration_time_s > clean.iteration_time_s);
  }
}
