// Two settings of NVIDIA's Nemotron-4 340B benchmark recipe (docs/frameworks.md):
// Megatron-Core's deferred output-layer weight gradients and Transformer Engine's FP8
// primary weights, checked on the validation scenario that uses them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "models/layer_steps.hpp"
#include "models/memory_model.hpp"
#include "scenario_fixtures.hpp"
#include "sim/cost_model.hpp"
#include "tools/frontend/job.hpp"
#include "tools/frontend/scenario.hpp"

using namespace trainsim;

namespace {

using testing::catalog;

const std::string kNemotron =
    std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/validation/nemo2407_h100_fp8_Nemotron-340B_128gpu.json";

Scenario nemotron(const std::vector<std::string>& sets = {}) { return load_scenario_file(kNemotron, sets, catalog()); }

TrainingPlan plan_of(const Scenario& s) {
  const Cluster cluster(s.cluster);
  return plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{});
}

// Tasks whose label is `label`, in program order.
std::vector<std::uint32_t> labelled(const ProgramTemplate& p, const std::string& label) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t t = 0; t < p.tasks.size(); ++t) {
    if (p.labels[p.tasks[t].label] == label) out.push_back(t);
  }
  return out;
}

bool depends_on(const ProgramTemplate& p, std::uint32_t task, std::uint32_t dep) {
  const auto deps = p.deps_of(task);
  return std::find(deps.begin(), deps.end(), dep) != deps.end();
}

const char* kPipelined = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-h100", "nodes": 1},
  "parallel": {"tp": 2, "pp": 2, "dp": 2, "zero": 1, "micro_batch": 1, "global_batch": 16, "sequence_parallel": true},
  "training": {"seq_len": 2048, "precision": "fp8", "framework": "megatron-te"}
})";

// The diagnostics of kPipelined with `base` and then `sets` (testing::errors_of, "bad.json").
std::string errors_with(const std::vector<std::string>& base, std::vector<std::string> sets = {}) {
  sets.insert(sets.begin(), base.begin(), base.end());
  return testing::errors_of(kPipelined, sets);
}

}  // namespace

TEST_CASE("Deferred output-layer weight gradients: the last stage runs them in the pipeline flush") {
  const Scenario s = nemotron();
  REQUIRE(s.training.defer_embedding_wgrad);
  REQUIRE(s.training.wgrad_deferral_limit == 22);
  const int mbs = s.parallel.micro_batches();
  REQUIRE(mbs == 16);  // every micro-batch of the step is deferred (16 < 22)
  const TrainingPlan plan = plan_of(s);
  const ProgramTemplate& last = plan.setup.programs.back();
  const std::vector<std::uint32_t> gemms = labelled(last, "W head.wgrad"),
                                   gathers = labelled(last, "W tp.ag.head.input");
  REQUIRE(gemms.size() == static_cast<std::size_t>(mbs));
  REQUIRE(gathers.size() == gemms.size());
  CHECK(labelled(last, "B head.wgrad").empty());
  CHECK(labelled(last, "B tp.ag.head.input").empty());
  CHECK(labelled(last, "B head.dgrad").size() == gemms.size());  // the input gradient stays in the backward
  // After the stage's last backward task, in Megatron-Core's double-buffered chain.
  std::uint32_t last_backward = 0;
  for (std::uint32_t t = 0; t < last.tasks.size(); ++t) {
    if (last.labels[last.tasks[t].label].starts_with("B ")) last_backward = t;
  }
  CHECK(gathers.front() > last_backward);
  for (std::size_t i = 0; i < gemms.size(); ++i) {
    CHECK(depends_on(last, gemms[i], gathers[i]));
    if (i > 0) CHECK(depends_on(last, gemms[i], gemms[i - 1]));
    if (i > 1) CHECK(depends_on(last, gathers[i], gemms[i - 2]));  // the buffer GEMM i - 2 read
  }
  // The output layer's gradient is reduced after the last deferred GEMM.
  bool reduced_after = false;
  for (std::uint32_t t = gemms.back(); t < last.tasks.size(); ++t) {
    const Task& task = last.tasks[t];
    if (task.kind == TaskKind::Collective && task.comm_class == CommClass::DP && depends_on(last, t, gemms.back()))
      reduced_after = true;
  }
  CHECK(reduced_after);
  // The other stages have no output layer.
  for (std::size_t i = 0; i + 1 < plan.setup.programs.size(); ++i)
    CHECK(labelled(plan.setup.programs[i], "W head.wgrad").empty());

  // A limit defers the first micro-batches only.
  const TrainingPlan eight = plan_of(nemotron({"training.wgrad_deferral_limit=8"}));
  CHECK(labelled(eight.setup.programs.back(), "W head.wgrad").size() == 8);
  CHECK(labelled(eight.setup.programs.back(), "B head.wgrad").size() == static_cast<std::size_t>(mbs - 8));

  // The figures docs/frameworks.md quotes: the step, and the last stage's kept buffers.
  const Scenario off = nemotron({"training.defer_embedding_wgrad_compute=false"});
  CHECK_FALSE(off.warnings.empty());  // the recipe's limit, now without effect, is said
  const JobReport with = simulate(s), without = simulate(off);
  CHECK(with.iteration_time_s == doctest::Approx(3.371).epsilon(0.0005 / 3.371));
  CHECK(without.iteration_time_s == doctest::Approx(3.461).epsilon(0.0005 / 3.461));
  const double tokens = s.training.seq_len;
  const double kept = mbs * tokens * 2 * (256000.0 / 8 + 18432.0 / 8);
  const double buffers = with.per_stage.back().memory.buffers - without.per_stage.back().memory.buffers;
  CHECK(buffers == doctest::Approx(kept));
  CHECK(buffers / (1 << 30) == doctest::Approx(4.2).epsilon(0.05 / 4.2));
  CHECK(with.per_stage.front().memory.buffers == without.per_stage.front().memory.buffers);
}

TEST_CASE("Deferred output-layer weight gradients: Megatron's pipeline schedules only") {
  const std::vector<std::string> defer{"training.defer_embedding_wgrad_compute=true"};
  CHECK(errors_with(defer).empty());
  auto with = [&](const std::vector<std::string>& sets) { return errors_with(defer, sets); };
  const std::string path = "bad.json: /training/defer_embedding_wgrad_compute:";
  CHECK(with({"parallel.pp=1", "parallel.dp=4"}).find(path) != std::string::npos);
  CHECK(with({"parallel.schedule=\"zb-h1\""}).find(path) != std::string::npos);
  CHECK(with({"training.grad_accumulation=\"autograd\""}).find(path) != std::string::npos);
  CHECK(with({"training.framework=\"deepspeed\"", "training.precision=\"bf16\""}).find(path) != std::string::npos);
  CHECK(with({"training.defer_embedding_wgrad_compute=1"}).find(path) != std::string::npos);
  CHECK(with({"training.wgrad_deferral_limit=-1"}).find("bad.json: /training/wgrad_deferral_limit:") !=
        std::string::npos);
  // On a small pipeline too, the flush runs one GEMM per micro-batch and the step moves.
  const Scenario s = load_scenario_text(kPipelined, "defer.json", "", defer, catalog());
  const Scenario plain = load_scenario_text(kPipelined, "defer.json", "", {}, catalog());
  CHECK(labelled(plan_of(s).setup.programs.back(), "W head.wgrad").size() == 8);
  CHECK(simulate(s).iteration_time_s != simulate(plain).iteration_time_s);
}

TEST_CASE("FP8 parameters: a transpose per step, FP8 all-gathers, the shard cast in the optimizer step") {
  const Scenario s = nemotron();
  REQUIRE(s.training.fp8_params);
  const Scenario b = nemotron({"training.fp8_params=false"});
  const ModelSteps steps = build_model_steps(s.model, s.parallel, s.training);
  const double layer = steps.of(LayerKind::Dense).grad_elements;
  const double linear = s.model.linear_weights_per_layer_per_tp_rank(s.parallel.tp);
  // Nemotron-340B's four matrices per TP rank: QKV (18432 x (18432 + 2 x 8 x 192)), the
  // projection and the two MLP matrices (18432 x 73728 each), split 8 ways.
  CHECK(linear == doctest::Approx((18432.0 * 21504 + 18432.0 * 18432 + 2 * 18432.0 * 73728) / 8));
  CHECK(layer - linear == doctest::Approx(4 * 18432.0));  // the two LayerNorms' weights and biases
  const TrainingPlan fp8 = plan_of(s), bf16 = plan_of(b);
  const ProgramTemplate& mid = fp8.setup.programs.at(1);  // a stage of 12 layers, no embedding or head
  const ProgramTemplate& mid_b = bf16.setup.programs.at(1);
  int casts = 0;
  for (const Task& t : mid.tasks) {
    if (t.kind != TaskKind::Compute) continue;
    const ComputeOp& op = mid.ops[t.ref];
    if (op.name != "fp8.weight.cast") continue;
    ++casts;
    CHECK(op.bytes == doctest::Approx(2 * layer));  // read 1 B, write the transpose's 1 B
    CHECK(op.kernels == 4);
    CHECK(op.memory_kernel == MemoryKernel::TeCastTranspose);
  }
  CHECK(casts == 12);
  for (const ComputeOp& op : mid_b.ops) {
    if (op.name == "fp8.weight.cast") CHECK(op.bytes == doctest::Approx(4 * layer));
  }
  // The distributed optimizer's parameter all-gathers: 1 B per FP8 weight element.
  auto gathered = [](const ProgramTemplate& p) {
    double bytes = 0;
    for (const Task& t : p.tasks) {
      if (t.kind == TaskKind::Collective && t.comm_class == CommClass::DP && t.collective == CollectiveKind::AllGather)
        bytes += static_cast<double>(t.bytes);
    }
    return bytes;
  };
  CHECK(gathered(mid_b) == doctest::Approx(12 * 2 * layer).epsilon(1e-6));
  CHECK(gathered(mid) == doctest::Approx(12 * (2 * layer - linear)).epsilon(1e-6));
  // The step casts its shard (dp 2) from the bf16 master: read 2 B, write 1 B.
  auto step_bytes = [](const ProgramTemplate& p) {
    for (const ComputeOp& op : p.ops) {
      if (op.name == "optimizer.step") return op.bytes;
    }
    FAIL("no optimizer step");
    return 0.0;
  };
  CHECK(step_bytes(mid) - step_bytes(mid_b) == doctest::Approx(12 * linear / 2 * 3));
  // The first stage's optimizer step, bf16 state against an fp32 master (docs/frameworks.md,
  // "Optimizers": 17 ms against 40 ms).
  auto step_seconds = [](const Scenario& sc) {
    const Cluster cluster(sc.cluster);
    const ComputeCostModel costs(cluster, sc.profiles);
    const ProgramTemplate first = plan_of(sc).setup.programs.front();
    for (const ComputeOp& op : first.ops) {
      if (op.name == "optimizer.step") return costs.seconds(op, 0);
    }
    FAIL("no optimizer step");
    return 0.0;
  };
  CHECK(step_seconds(s) == doctest::Approx(0.017).epsilon(0.0005 / 0.017));
  CHECK(step_seconds(nemotron({"training.optimizer_dtype=\"fp32\""})) == doctest::Approx(0.040).epsilon(0.0005 / 0.04));
  // Memory: the bf16 master of the shard.
  const JobReport with = simulate(s), without = simulate(b);
  CHECK(with.per_stage.at(1).memory.optimizer - without.per_stage.at(1).memory.optimizer ==
        doctest::Approx(12 * linear / 2 * 2));
  CHECK(with.per_stage.at(1).memory.weights == without.per_stage.at(1).memory.weights);
  CHECK(without.iteration_time_s == doctest::Approx(3.437).epsilon(0.0005 / 3.437));  // docs/validation.md
  CHECK(with.iteration_time_s < without.iteration_time_s);
  // An fp32 master: read 4 B, write 1 B instead of the 16-bit copy's 6 B.
  const Scenario f = load_scenario_text(kPipelined, "defer.json", "", {"training.fp8_params=true"}, catalog());
  const Scenario g = load_scenario_text(kPipelined, "defer.json", "", {}, catalog());
  const double lin = f.model.linear_weights_per_layer_per_tp_rank(2);
  const int layers = f.model.layers / 2;
  CHECK(step_bytes(plan_of(g).setup.programs.at(0)) - step_bytes(plan_of(f).setup.programs.at(0)) ==
        doctest::Approx(layers * lin / 2));
}

TEST_CASE("FP8 parameters: Transformer Engine's per-tensor FP8 of dense layers only") {
  const std::vector<std::string> on{"training.fp8_params=true"};
  CHECK(errors_with(on).empty());
  auto with = [&](const std::vector<std::string>& sets) { return errors_with(on, sets); };
  const std::string path = "bad.json: /training/fp8_params:";
  CHECK(with({"training.precision=\"bf16\""}).find(path) != std::string::npos);
  CHECK(with({"training.framework=\"default\""}).find(path) != std::string::npos);
  CHECK(with({"training.fp8_recipe=\"blockwise\""}).find(path) != std::string::npos);
  CHECK(with({"parallel.zero=3", "parallel.pp=1", "parallel.dp=4"}).find(path) != std::string::npos);
  CHECK(with({"training.fp8_params=\"yes\""}).find(path) != std::string::npos);
  CHECK(with({"training.fp8_recipe=\"current\""}).empty());
}
