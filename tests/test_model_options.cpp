#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost_model.hpp"
#include "tools/frontend/cli.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

// Framework behaviours a scenario selects (attention kernel, async TP gradient
// all-reduce) and the compute/communication contention of the shipped profiles.

namespace {

const Catalog& catalog() {
  static const Catalog c = load_builtin_catalog();
  return c;
}

const char* kBase = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 1},
  "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
  "training": {"seq_len": 4096, "precision": "bf16", "attention": "flash"}
})";

JobReport run(const std::vector<std::string>& sets, const std::string& text = kBase) {
  const Scenario s = load_scenario_text(text, "options.json", "", sets, catalog());
  const JobReport r = simulate(s);
  REQUIRE(r.feasible);
  return r;
}

// Seconds of the first compute op called `name` in stage 0's program (no contention).
double kernel_seconds(const std::vector<std::string>& sets, const std::string& name) {
  const Scenario s = load_scenario_text(kBase, "options.json", "", sets, catalog());
  const Cluster cluster(s.cluster);
  REQUIRE(cluster.num_gpu_types() == 1);
  const ComputeCostModel costs(cluster, s.profiles);
  const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{});
  for (const ComputeOp& op : plan.setup.programs.at(0).ops) {
    if (op.name == name) return costs.seconds(op, 0);
  }
  FAIL("no kernel " << name);
  return 0;
}

// `scenario` with a calibration entry pointing at a copy of the shipped A100 80GB
// profile changed by `edit`, written to `file` in the temp directory.
std::string with_edited_a100_profile(std::string scenario, const std::string& file,
                                     const std::function<void(nlohmann::json&)>& edit) {
  std::string text;
  for (const auto& f : calibration_profile_files()) {
    if (f.path.find("a100-sxm4-80gb.json") != std::string_view::npos) text = std::string(f.text);
  }
  REQUIRE_FALSE(text.empty());
  nlohmann::json profile = nlohmann::json::parse(text);
  edit(profile);
  const auto path = std::filesystem::temp_directory_path() / file;
  std::ofstream(path) << profile.dump(2);
  scenario.insert(scenario.rfind('}'), ", \"calibration\": {\"profiles\": [\"" + path.string() + "\"]}\n");
  return scenario;
}

}  // namespace

TEST_CASE("the Triton FlashAttention kernel runs at the profile's relative speed") {
  const JobReport fa2 = run({});
  const JobReport triton = run({"training.attention=flash-triton"});
  const double speed = catalog().find_profile_for_gpu("A100-SXM4-80GB")->triton_attention_speed.value;
  REQUIRE(speed > 0);
  REQUIRE(speed < 1);
  // Attention at 4k tokens is compute-bound: its time scales by exactly 1/speed;
  // the GEMMs do not change.
  const std::vector<std::string> t{"training.attention=flash-triton"};
  CHECK(kernel_seconds(t, "attn.core") == doctest::Approx(kernel_seconds({}, "attn.core") / speed).epsilon(1e-3));
  CHECK(kernel_seconds(t, "attn.core.bwd") ==
        doctest::Approx(kernel_seconds({}, "attn.core.bwd") / speed).epsilon(1e-3));
  CHECK(kernel_seconds(t, "mlp.up") == doctest::Approx(kernel_seconds({}, "mlp.up")));
  CHECK(triton.iteration_time_s > fa2.iteration_time_s);
}

TEST_CASE("flash-triton without a Triton figure in the profile is an input error") {
  const std::string file = "trainsim-no-triton-a100.json";
  const std::string scenario =
      with_edited_a100_profile(kBase, file, [](nlohmann::json& p) { p.erase("triton_attention_speed"); });
  std::string error;
  try {
    load_scenario_text(scenario, "options.json", "", {"training.attention=flash-triton"}, catalog());
  } catch (const InputError& e) {
    error = e.what();
  }
  CHECK(error.find("options.json: /training/attention:") != std::string::npos);
  const auto first = error.find("triton_attention_speed");
  CHECK(first != std::string::npos);
  CHECK(error.find("triton_attention_speed", first + 1) == std::string::npos);  // reported once
  // FlashAttention-2 needs no such figure.
  CHECK_NOTHROW(load_scenario_text(scenario, "options.json", "", {}, catalog()));
  std::filesystem::remove(std::filesystem::temp_directory_path() / file);
}

TEST_CASE("a blocking backward TP all-reduce (2021 Megatron-LM) costs time only with TP") {
  const JobReport async = run({});
  const JobReport blocking = run({"parallel.tp_grad_overlap=false"});
  CHECK(blocking.iteration_time_s > async.iteration_time_s);
  const JobReport async1 = run({"parallel.tp=1", "parallel.dp=8"});
  const JobReport blocking1 = run({"parallel.tp=1", "parallel.dp=8", "parallel.tp_grad_overlap=false"});
  CHECK(blocking1.iteration_time_s == async1.iteration_time_s);
}

TEST_CASE("communication beside compute slows it: FSDP with contention is slower than without") {
  const char* fsdp = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-a100", "nodes": 1},
  "parallel": {"tp": 1, "dp": 8, "zero": 3, "micro_batch": 2, "global_batch": 64},
  "training": {"seq_len": 2048, "precision": "bf16"}
})";
  const JobReport contended = run({}, fsdp);
  const std::string file = "trainsim-no-contention-a100.json";
  const std::string scenario =
      with_edited_a100_profile(fsdp, file, [](nlohmann::json& p) { p["compute_share_during_comm"]["value"] = 1.0; });
  const JobReport free = run({}, scenario);
  CHECK(contended.iteration_time_s > free.iteration_time_s);
  // Only the overlapped part slows down: never more than the whole compute at the reduced share.
  const double share = catalog().find_profile_for_gpu("A100-SXM4-80GB")->compute_share_during_comm.value;
  CHECK(contended.iteration_time_s < free.iteration_time_s / share);
  std::filesystem::remove(std::filesystem::temp_directory_path() / file);
}
