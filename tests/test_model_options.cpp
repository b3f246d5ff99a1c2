#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/layer_steps.hpp"
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
  // The Triton kernel has no dropout: both runs without it.
  const std::vector<std::string> f{"training.dropout=false"};
  const JobReport fa2 = run(f);
  const JobReport triton = run({"training.dropout=false", "training.attention=flash-triton"});
  const double speed = catalog().find_profile_for_gpu("A100-SXM4-80GB")->triton_attention_speed.value;
  REQUIRE(speed > 0);
  REQUIRE(speed < 1);
  // Attention at 4k tokens is compute-bound: its time scales by exactly 1/speed;
  // the GEMMs do not change.
  const std::vector<std::string> t{"training.dropout=false", "training.attention=flash-triton"};
  CHECK(kernel_seconds(t, "attn.core") == doctest::Approx(kernel_seconds(f, "attn.core") / speed).epsilon(1e-3));
  CHECK(kernel_seconds(t, "attn.core.bwd") ==
        doctest::Approx(kernel_seconds(f, "attn.core.bwd") / speed).epsilon(1e-3));
  CHECK(kernel_seconds(t, "mlp.up") == doctest::Approx(kernel_seconds(f, "mlp.up")));
  CHECK(triton.iteration_time_s > fa2.iteration_time_s);
}

TEST_CASE("flash-triton without a Triton figure in the profile is an input error") {
  const std::string file = "trainsim-no-triton-a100.json";
  const std::string scenario =
      with_edited_a100_profile(kBase, file, [](nlohmann::json& p) { p.erase("triton_attention_speed"); });
  std::string error;
  try {
    load_scenario_text(scenario, "options.json", "", {"training.dropout=false", "training.attention=flash-triton"},
                       catalog());
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

namespace {

// Llama-3 8B on 8 H200 (RMSNorm, RoPE, SwiGLU, no dropout), one framework per run.
const char* kLlama = R"({
  "model": "llama3-8b",
  "cluster": {"node": "dgx-h200", "nodes": 1},
  "parallel": {"tp": 1, "dp": 8, "zero": 3, "micro_batch": 1, "global_batch": 64, "recompute": "full"},
  "training": {"seq_len": 8192, "precision": "bf16", "dropout": false}
})";

Scenario llama(const std::vector<std::string>& sets) {
  return load_scenario_text(kLlama, "llama.json", "", sets, catalog());
}

// The first forward op called `name` in stage 0's program.
const ComputeOp& op_named(const TrainingPlan& plan, const std::string& name) {
  for (const ComputeOp& op : plan.setup.programs.at(0).ops) {
    if (op.name == name) return op;
  }
  FAIL("no kernel " << name);
  static const ComputeOp none;
  return none;
}

}  // namespace

TEST_CASE("training.framework: eager PyTorch runs more and heavier elementwise kernels than fused frameworks") {
  const Scenario def = llama({}), eager = llama({"training.framework=eager"});
  const Scenario compiled = llama({"training.framework=torch-compile"}), fsdp2 = llama({"training.framework=fsdp2"});
  const Cluster cluster(def.cluster);
  auto plan = [&](const Scenario& s) { return plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{}); };
  const TrainingPlan pd = plan(def), pe = plan(eager), pc = plan(compiled), pf = plan(fsdp2);
  // Unfused RMSNorm (8 kernels, 9x the traffic of the fused one), RoPE, SwiGLU, FP32 cross-entropy.
  CHECK(op_named(pe, "norm1").bytes == doctest::Approx(9 * op_named(pd, "norm1").bytes));
  CHECK(op_named(pe, "norm1").kernels == 8);
  CHECK(op_named(pd, "norm1").kernels == 1);
  CHECK(op_named(pe, "attn.rope").bytes > op_named(pd, "attn.rope").bytes);
  CHECK(op_named(pe, "mlp.act").bytes > op_named(pd, "mlp.act").bytes);
  CHECK(op_named(pe, "loss.xent").bytes > op_named(pd, "loss.xent").bytes);
  // GEMMs are the same kernels whatever the framework.
  CHECK(op_named(pe, "mlp.up").flops == op_named(pd, "mlp.up").flops);
  // Under ZeRO-3 (16-bit gathers: FSDP's param_dtype) every framework that casts
  // weights casts the 1/dp shard before its all-gather: 6 bytes per parameter of it;
  // FSDP1 (eager, torch.compile) in one launch for the flat parameter.
  const double per_layer = def.model.params_per_layer();
  CHECK(op_named(pe, "amp.weight.cast").bytes == doctest::Approx(per_layer * 6 / 8));
  CHECK(op_named(pc, "amp.weight.cast").bytes == doctest::Approx(per_layer * 6 / 8));
  CHECK(op_named(pf, "amp.weight.cast").bytes == doctest::Approx(per_layer * 6 / 8));
  CHECK(op_named(pe, "amp.weight.cast").kernels == 1);
  CHECK(op_named(pf, "amp.weight.cast").kernels == 5);
  for (const ComputeOp& op : pd.setup.programs.at(0).ops) CHECK(op.name.find("cast") == std::string::npos);
  // Torch.compile fuses the pointwise chains (fused lists) but keeps the casts.
  CHECK(op_named(pc, "norm1").bytes == op_named(pd, "norm1").bytes);

  const double t_def = simulate(def).iteration_time_s, t_eager = simulate(eager).iteration_time_s;
  const double t_comp = simulate(compiled).iteration_time_s, t_fsdp2 = simulate(fsdp2).iteration_time_s;
  CHECK(t_eager > t_comp);
  CHECK(t_comp > t_def);
  // The same lists and fewer cast launches, but FSDP1 (eager) passes over every unit's
  // gradient before its reduce-scatter (fsdp_gradient_passes), which fsdp2 is not charged.
  CHECK(t_eager > t_fsdp2);
  CHECK(t_fsdp2 > t_comp);  // unfused kernels
  // Elementwise work is a minority of a step dominated by GEMMs and attention.
  CHECK(t_eager < 1.5 * t_def);
}

TEST_CASE("training.framework megatron-te picks cuDNN attention where the GPU's profile has it") {
  const Scenario te = llama({"training.framework=megatron-te"});
  CHECK(te.training.attention == AttentionKind::Cudnn);
  CHECK(simulate(te).iteration_time_s < simulate(llama({})).iteration_time_s);
  // A named attention kernel wins over the framework's default.
  CHECK(llama({"training.framework=megatron-te", "training.attention=flash"}).training.attention ==
        AttentionKind::Flash);
  // No cuDNN curves in the A100 profile: FlashAttention-2.
  std::string no_attention = kLlama;
  no_attention.replace(no_attention.find("dgx-h200"), 8, "dgx-a100");
  const Scenario a100 =
      load_scenario_text(no_attention, "a100.json", "", {"training.framework=megatron-te"}, catalog());
  REQUIRE(a100.profiles.at(0).gpu.find("A100") != std::string::npos);
  CHECK(a100.training.attention == AttentionKind::Flash);
  // An unknown framework is an input error naming the key.
  std::string error;
  try {
    llama({"training.framework=jax"});
  } catch (const InputError& e) {
    error = e.what();
  }
  CHECK(error.find("/training/framework") != std::string::npos);
}

namespace {

// Stage `stage`'s program of `text` with `sets` applied.
ProgramTemplate stage_program(const std::string& text, const std::vector<std::string>& sets, int stage = 0) {
  const Scenario s = load_scenario_text(text, "options.json", "", sets, catalog());
  const Cluster cluster(s.cluster);
  const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{});
  return plan.setup.programs.at(static_cast<std::size_t>(stage));
}

// Tasks whose label ends with `suffix`, in program order.
std::vector<std::uint32_t> tasks_ending(const ProgramTemplate& p, const std::string& suffix) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t t = 0; t < p.tasks.size(); ++t) {
    const std::string_view l = p.labels[p.tasks[t].label];
    if (l.size() >= suffix.size() && l.compare(l.size() - suffix.size(), suffix.size(), suffix) == 0) out.push_back(t);
  }
  return out;
}

}  // namespace

TEST_CASE("training.framework eager: autocast casts whole weights, ZeRO-3 casts the shard before each gather") {
  const std::vector<std::string> eager = {"training.framework=eager"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), eager.begin(), eager.end());
    return llama(sets);
  };
  const Scenario ddp = with({"parallel.zero=1"}), fsdp = with({});
  const Cluster cluster(ddp.cluster);
  auto plan = [&](const Scenario& s) { return plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{}); };
  const TrainingPlan pd = plan(ddp), pf = plan(fsdp);
  const double per_layer = ddp.model.params_per_layer();
  // Replicated weights: autocast casts each weight matrix of the layer once per forward.
  CHECK(op_named(pd, "amp.weight.cast").bytes == doctest::Approx(per_layer * 6));
  CHECK(op_named(pd, "amp.weight.cast").kernels == 5);
  for (const ComputeOp& op : pd.setup.programs.at(0).ops) CHECK(op.name != "fsdp.weight.cast.bwd");
  // ZeRO-3: FSDP casts this rank's 1/dp of the flat parameter before the forward's
  // gather and again before the backward's re-gather.
  CHECK(op_named(pf, "amp.weight.cast").bytes == doctest::Approx(per_layer * 6 / 8));
  CHECK(op_named(pf, "fsdp.weight.cast.bwd").bytes == doctest::Approx(per_layer * 6 / 8));
  CHECK(op_named(pf, "fsdp.weight.cast.bwd").kernels == 1);
  // Full recomputation re-casts under autocast, not under FSDP (the recomputed
  // forward runs on the weights gathered for backward).
  REQUIRE(ddp.parallel.recompute == Recompute::Full);
  auto casts = [&](const std::vector<std::string>& sets) {
    return tasks_ending(stage_program(kLlama, sets), "amp.weight.cast").size();
  };
  const std::size_t ddp_casts = casts({"training.framework=eager", "parallel.zero=1"});
  CHECK(ddp_casts > 0);
  CHECK(casts({"training.framework=eager"}) * 2 == ddp_casts);
  CHECK(casts({"training.framework=fsdp2"}) * 2 == ddp_casts);
}

TEST_CASE("framework deepspeed: fp32 gradient accumulation after every micro-batch and an fp32 all-reduce") {
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "pp": 2, "dp": 2, "zero": 1, "micro_batch": 2, "global_batch": 16, "dp_overlap": false},
    "training": {"seq_len": 2048, "precision": "bf16", "grad_reduce": "fp32"}
  })";
  const ProgramTemplate megatron = stage_program(text, {});
  const ProgramTemplate ds = stage_program(text, {"training.framework=deepspeed"});
  CHECK(tasks_ending(megatron, "grad.accumulate.fp32").empty());
  const auto acc = tasks_ending(ds, "grad.accumulate.fp32");
  REQUIRE(acc.size() == 4);  // 16 / (2 x 2) micro-batches
  // 18 B per parameter of the stage (its 12 layers and the embedding), tp 2 (the position
  // table whole on each rank).
  const Scenario s = load_scenario_text(text, "options.json", "", {}, catalog());
  const double params = 12 * s.model.params_per_layer() / 2 + s.model.embedding_params_per_tp_rank(2);
  CHECK(ds.ops[ds.tasks[acc[0]].ref].bytes == doctest::Approx(18 * params).epsilon(1e-3));
  // update_hp_grads loops over the parameter tensors, a cast and an add each, issued by the
  // host: per layer two LayerNorms' weights and biases, four weight matrices (and four biases
  // with linear biases), then the word and position embeddings.
  REQUIRE_FALSE(s.model.rope);
  const int tensors = 12 * (2 * 2 + 4 + (s.model.bias ? 4 : 0)) + 2;
  CHECK(ds.ops[ds.tasks[acc[0]].ref].kernels == 2 * tensors);
  CHECK(ds.ops[ds.tasks[acc[0]].ref].host_dispatch_seconds == host_dispatch_seconds(Framework::DeepSpeed));
  // Megatron's distributed optimizer reduce-scatters; DeepSpeed's BF16_Optimizer all-reduces.
  CHECK(tasks_ending(megatron, "dp.ar.grads").empty());
  CHECK_FALSE(tasks_ending(megatron, "dp.rs.grads").empty());
  CHECK(tasks_ending(ds, "dp.rs.grads").empty());
  const auto ar = tasks_ending(ds, "dp.ar.grads");
  REQUIRE_FALSE(ar.empty());
  CHECK(ds.tasks[ar[0]].collective == CollectiveKind::AllReduce);
  CHECK_FALSE(tasks_ending(ds, "dp.ag.params").empty());  // update_lp_params all-gathers the bf16 weights
  // Both cost time: the step is slower than Megatron's.
  CHECK(run({}, text).iteration_time_s < run({"training.framework=deepspeed"}, text).iteration_time_s);
  // Only bf16 with ZeRO 0/1 runs the BF16_Optimizer.
  CHECK(tasks_ending(stage_program(text, {"training.framework=deepspeed", "training.precision=fp16"}),
                     "grad.accumulate.fp32")
            .empty());
}

TEST_CASE("grad_accumulation autograd: an add of 3 x 2 B per parameter after every micro-batch but the first") {
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2, "global_batch": 16, "dp_overlap": false},
    "training": {"seq_len": 2048, "precision": "fp16", "grad_reduce": "fp16"}
  })";
  CHECK(tasks_ending(stage_program(text, {}), "grad.accumulate").empty());  // fused: inside the wgrad GEMM
  const ProgramTemplate autograd = stage_program(text, {"training.grad_accumulation=autograd"});
  const auto acc = tasks_ending(autograd, "grad.accumulate");
  REQUIRE(acc.size() == 3);  // 16 / (2 x 2) micro-batches; the first one's gradient becomes .grad as it is
  for (const std::uint32_t t : acc) CHECK(autograd.tasks[t].microbatch > 0);
  // Read both 16-bit gradients, write one, per parameter of the stage (12 layers and the embedding, tp 2;
  // the position table whole on each rank).
  const Scenario s = load_scenario_text(text, "options.json", "", {}, catalog());
  const double params = 12 * s.model.params_per_layer() / 2 + s.model.embedding_params_per_tp_rank(2);
  CHECK(autograd.ops[autograd.tasks[acc[0]].ref].bytes == doctest::Approx(6 * params).epsilon(1e-3));
  CHECK(run({}, text).iteration_time_s < run({"training.grad_accumulation=autograd"}, text).iteration_time_s);
  // FSDP and DeepSpeed accumulate otherwise: the combination is an input error naming the key.
  for (const char* other : {"parallel.zero=3", "training.framework=deepspeed"}) {
    std::string error;
    try {
      load_scenario_text(text, "options.json", "", {"training.grad_accumulation=autograd", other}, catalog());
    } catch (const InputError& e) {
      error = e.what();
    }
    CHECK(error.find("options.json: /training/grad_accumulation:") != std::string::npos);
  }
}

TEST_CASE("ddp_impl torch: PyTorch DDP copies each gradient into its bucket and back, one kernel per tensor") {
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 2, "global_batch": 32, "dp_overlap": true,
                 "dp_bucket": "25MiB"},
    "training": {"seq_len": 2048, "precision": "fp16", "grad_reduce": "fp16", "framework": "megatron-legacy",
                 "grad_accumulation": "autograd"}
  })";
  const ProgramTemplate local = stage_program(text, {});
  CHECK(tasks_ending(local, "ddp.grad.copy_in").empty());  // Megatron's local DDP reads .grad in place
  CHECK(tasks_ending(local, "ddp.grad.copy_out").empty());
  const ProgramTemplate torch = stage_program(text, {"parallel.ddp_impl=torch"});
  const auto in = tasks_ending(torch, "ddp.grad.copy_in");
  const auto out = tasks_ending(torch, "ddp.grad.copy_out");
  const Scenario s = load_scenario_text(text, "options.json", "", {}, catalog());
  REQUIRE(in.size() == static_cast<std::size_t>(s.model.layers + 2));  // each layer's, the embedding's, the head's
  REQUIRE(out.size() == 1);
  double in_bytes = 0;
  int in_kernels = 0;
  for (const std::uint32_t t : in) {
    CHECK(torch.tasks[t].microbatch == 1);  // only the last backward, which syncs (no_sync before it)
    in_bytes += torch.ops[torch.tasks[t].ref].bytes;
    in_kernels += torch.ops[torch.tasks[t].ref].kernels;
  }
  // Read 2 + write 2 B per parameter each way; 12 tensors per layer (2 LayerNorms, 4 weights,
  // 4 biases), the word and position embeddings, and the head's final norm (2 tensors): at
  // pp = 1 the tied output weight is the word embedding, copied once. The copies cover every
  // gradient the all-reduce carries, and the copy back moves what was copied in.
  REQUIRE(s.model.tied_embeddings);
  const double params = s.model.layers * s.model.params_per_layer() + s.model.embedding_params();
  CHECK(in_bytes == doctest::Approx(4 * params).epsilon(1e-3));
  CHECK(in_kernels == 12 * s.model.layers + 2 + 2);
  CHECK(torch.ops[torch.tasks[out[0]].ref].bytes == doctest::Approx(in_bytes).epsilon(1e-2));
  CHECK(torch.ops[torch.tasks[out[0]].ref].kernels == 12 * s.model.layers + 2 + 2);  // + the final norm's 2
  CHECK(run({}, text).iteration_time_s < run({"parallel.ddp_impl=torch"}, text).iteration_time_s);
  std::string error;
  try {
    load_scenario_text(text, "options.json", "", {"parallel.ddp_impl=torch", "training.framework=default"}, catalog());
  } catch (const InputError& e) {
    error = e.what();
  }
  CHECK(error.find("options.json: /parallel/ddp_impl:") != std::string::npos);
  error.clear();
  try {  // with a pipeline DDP would sync every micro-batch, which is not modelled
    load_scenario_text(text, "options.json", "", {"parallel.ddp_impl=torch", "parallel.pp=2", "parallel.dp=4"},
                       catalog());
  } catch (const InputError& e) {
    error = e.what();
  }
  CHECK(error.find("options.json: /parallel/ddp_impl:") != std::string::npos);
}

TEST_CASE("position alibi: no RoPE kernels; unfused attention reads the broadcast bias, fused kernels add it free") {
  const std::string text = R"({
    "model": {"name": "alibi-test", "layers": 4, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 50304,
              "position": "alibi"},
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048, "precision": "bf16", "attention": "unfused"}
  })";
  const ProgramTemplate unfused = stage_program(text, {});
  CHECK(tasks_ending(unfused, "attn.rope").empty());
  const auto bias = tasks_ending(unfused, "attn.alibi");
  REQUIRE_FALSE(bias.empty());
  // Write and read 2 B per score: micro-batch 2 x 8 heads per TP rank x 2048 x 2048.
  CHECK(unfused.ops[unfused.tasks[bias[0]].ref].bytes == doctest::Approx(4.0 * 2 * 8 * 2048 * 2048));
  CHECK(tasks_ending(stage_program(text, {"training.attention=flash"}), "attn.alibi").empty());
  const ProgramTemplate rope = stage_program(text, {"model.position=rope"});
  CHECK(tasks_ending(rope, "attn.alibi").empty());
  CHECK_FALSE(tasks_ending(rope, "attn.rope").empty());
  // Like RoPE, ALiBi has no position table: the embedding holds the vocabulary only.
  const Scenario s = load_scenario_text(text, "options.json", "", {}, catalog());
  CHECK(s.model.alibi);
  CHECK_FALSE(s.model.rope);
  CHECK(s.model.embedding_params() == doctest::Approx(50304.0 * 2048));
}

TEST_CASE("ZeRO-3: the next layer's gather is issued before this layer's reduce-scatter; embedding and head sharded") {
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"dp": 8, "zero": 3, "micro_batch": 2, "global_batch": 32},
    "training": {"seq_len": 2048, "precision": "bf16"}
  })";
  const ProgramTemplate p = stage_program(text, {});
  auto first = [&](const std::string& suffix) {
    const auto t = tasks_ending(p, suffix);
    REQUIRE_FALSE(t.empty());
    return t.front();
  };
  // Backward of layer 23 (the last): the gather of layer 22 comes before its reduce-scatter
  // (FSDP's BACKWARD_PRE), so layer 22's backward never waits behind it.
  const auto gathers22 = tasks_ending(p, "L22 dp.ag.params");
  REQUIRE(gathers22.size() >= 2);  // forward and backward of the first micro-batch
  CHECK(gathers22[1] < first("B L23 dp.rs.grads"));
  // The embedding and the LM head (tied: one tensor) are gathered before the forward and
  // reduce-scattered after the backward, once per micro-batch; nothing is all-reduced.
  CHECK(tasks_ending(p, "dp.ag.params outer").size() == 2);
  const auto outer_rs = tasks_ending(p, "dp.rs.grads outer");
  REQUIRE(outer_rs.size() == 2);
  CHECK(p.tasks[outer_rs[0]].collective == CollectiveKind::ReduceScatter);
  const Scenario s = load_scenario_text(text, "options.json", "", {}, catalog());
  CHECK(static_cast<double>(p.tasks[outer_rs[0]].bytes) == doctest::Approx(s.model.embedding_params() * 4));
  CHECK(tasks_ending(p, "dp.ar.grads").empty());
  // BACKWARD_POST: the gather of layer 22 waits for the end of layer 23's backward
  // (still before its reduce-scatter), so the step takes longer than with BACKWARD_PRE.
  const ProgramTemplate post = stage_program(text, {"parallel.backward_prefetch=post"});
  const auto post22 = tasks_ending(post, "L22 dp.ag.params");
  REQUIRE(post22.size() >= 2);
  const auto b23 = tasks_ending(post, "B L23 mlp.down.wgrad");
  REQUIRE_FALSE(b23.empty());
  const auto deps = post.deps_of(post22[1]);
  CHECK(std::find(deps.begin(), deps.end(), tasks_ending(post, "B L23 norm1.bwd").front()) != deps.end());
  CHECK(post22[1] < tasks_ending(post, "B L23 dp.rs.grads").front());
  CHECK(run({}, text).iteration_time_s < run({"parallel.backward_prefetch=post"}, text).iteration_time_s);
}

TEST_CASE("MPT validation runs: FSDP's BACKWARD_POST gathers reach the GPU during the layer's backward") {
  // docs/frameworks.md, "Fully sharded data parallelism": llm-foundry's benchmark runs FSDP1 with
  // BACKWARD_POST and limit_all_gathers; the host issues layer l-1's gather from layer l's
  // post-backward hook once layer l+1's backward has finished on the GPU, so on the NCCL stream
  // it follows layer l+1's reduce-scatter and overlaps layer l's backward (the "pre" timing),
  // instead of waiting for the end of layer l's backward.
  const std::string file = std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/validation/mpt_1b_h100_64gpu_seq2048.json";
  const Scenario s = load_scenario_file(file, {}, catalog());
  REQUIRE(s.parallel.zero == 3);
  CHECK(s.parallel.backward_prefetch_pre);
  const Cluster cluster(s.cluster);
  const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{});
  const ProgramTemplate& p = plan.setup.programs.at(0);
  const auto gathers21 = tasks_ending(p, "L21 dp.ag.params");
  REQUIRE(gathers21.size() == 2);  // forward and backward of the one micro-batch
  // Its dependency is the first kernel of layer 22's backward, not the layer's last task (with
  // the eager lists, the shard cast for the next gather); the stream orders the rest.
  std::uint32_t first22 = static_cast<std::uint32_t>(p.tasks.size());
  for (std::uint32_t t = 0; t < p.tasks.size(); ++t) {
    if (p.labels[p.tasks[t].label].rfind("B L22 ", 0) == 0) first22 = std::min(first22, t);
  }
  const auto deps = p.deps_of(gathers21[1]);
  CHECK(std::find(deps.begin(), deps.end(), first22) != deps.end());
  const auto last22 = tasks_ending(p, "B L22 fsdp.weight.cast.bwd");
  REQUIRE(last22.size() == 1);
  CHECK(std::find(deps.begin(), deps.end(), last22.front()) == deps.end());
  CHECK(tasks_ending(p, "B L23 dp.rs.grads").front() < gathers21[1]);
  CHECK(gathers21[1] < tasks_ending(p, "B L22 dp.rs.grads").front());
}

TEST_CASE("distributed optimizer: a stage gathers its head's parameters before the head's forward") {
  // Megatron-Core's overlapped parameter gather buckets a stage's parameters
  // layer by layer; the LM head's updated shard is all-gathered before the head's
  // first forward, on a stage that holds only the head (stage_layers entry 0) and
  // on one whose last layer closed a bucket (gpt3-1.3b: every layer fills one).
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 2},
    "parallel": {"pp": 2, "dp": 8, "zero": 1, "micro_batch": 1, "global_batch": 32, "stage_layers": [24, 0]},
    "training": {"seq_len": 2048, "precision": "bf16"}
  })";
  const ProgramTemplate head_stage = stage_program(text, {}, 1);
  const auto gathers = tasks_ending(head_stage, "dp.ag.params");
  REQUIRE(gathers.size() == 1);
  const Scenario s = load_scenario_text(text, "options.json", "", {}, catalog());
  CHECK(static_cast<double>(head_stage.tasks[gathers[0]].bytes) ==
        doctest::Approx(static_cast<double>(s.model.vocab) * s.model.hidden * 2));  // the head's bf16 weight
  const auto norm = tasks_ending(head_stage, "final.norm");
  REQUIRE_FALSE(norm.empty());
  const auto deps = head_stage.deps_of(norm.front());
  CHECK(std::find(deps.begin(), deps.end(), gathers[0]) != deps.end());
  const ProgramTemplate with_layers = stage_program(text, {"parallel.stage_layers=[20,4]"}, 1);
  const auto all = tasks_ending(with_layers, "dp.ag.params");
  REQUIRE(all.size() == 5);  // four layer buckets, then the head's
  CHECK(static_cast<double>(with_layers.tasks[all.back()].bytes) ==
        doctest::Approx(static_cast<double>(s.model.vocab) * s.model.hidden * 2));
  const auto head_norm = tasks_ending(with_layers, "final.norm");
  REQUIRE_FALSE(head_norm.empty());
  const auto head_deps = with_layers.deps_of(head_norm.front());
  CHECK(std::find(head_deps.begin(), head_deps.end(), all.back()) != head_deps.end());
}

TEST_CASE("FSDP1 under ZeRO-3: each unit's flat gradient is catted, cast and divided before its reduce-scatter") {
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"dp": 8, "zero": 3, "micro_batch": 2, "global_batch": 32},
    "training": {"seq_len": 2048, "precision": "bf16", "grad_reduce": "fp32", "framework": "eager"}
  })";
  auto passes = [&](const std::vector<std::string>& sets) {
    const Scenario s = load_scenario_text(text, "options.json", "", sets, catalog());
    return fsdp_gradient_passes(s.training, s.parallel);
  };
  // bf16 parameters, fp32 reduction over 8 ranks: the cat (read + write 2 B), the cast
  // (read 2, write 4 B), the pre-division (read + write 4 B), the shard's post-division.
  CHECK(passes({}).bytes_per_element == doctest::Approx(4 + 6 + 8 + 8.0 / 8));
  CHECK(passes({}).kernels == 4);
  CHECK(passes({"training.framework=torch-compile"}).bytes_per_element == doctest::Approx(19));
  // bf16 reduction (Composer's PURE): no cast.
  CHECK(passes({"training.grad_reduce=bf16"}).bytes_per_element == doctest::Approx(4 + 4 + 4.0 / 8));
  CHECK(passes({"training.grad_reduce=bf16"}).kernels == 3);
  // Over 2 ranks the pre-division factor is 2 and the post-division by 1 is skipped;
  // over 6 ranks the factors are 4 and 1.5 (PyTorch's _get_gradient_predivide_factor).
  CHECK(passes({"parallel.dp=2", "parallel.tp=4", "parallel.global_batch=8"}).bytes_per_element ==
        doctest::Approx(4 + 6 + 8));
  CHECK(passes({"parallel.dp=2", "parallel.tp=4", "parallel.global_batch=8"}).kernels == 3);
  CHECK(passes({"parallel.dp=6", "parallel.tp=4", "cluster.nodes=3", "parallel.global_batch=24"}).bytes_per_element ==
        doctest::Approx(4 + 6 + 8 + 8.0 / 6));
  // PyTorch 1.13 (training.fsdp_pad_copy): F.pad's clone of the flat gradient in the
  // reduction dtype, read + write 4 B, one kernel more.
  CHECK(passes({"training.fsdp_pad_copy=true"}).bytes_per_element == doctest::Approx(19 + 8));
  CHECK(passes({"training.fsdp_pad_copy=true"}).kernels == 5);
  CHECK(passes({"training.fsdp_pad_copy=true", "training.grad_reduce=bf16"}).bytes_per_element ==
        doctest::Approx(8.5 + 4));
  CHECK(run({"training.fsdp_pad_copy=true"}, text).iteration_time_s > run({}, text).iteration_time_s);
  for (const char* other : {"training.framework=fsdp2", "training.framework=torch-compile", "parallel.zero=1"}) {
    std::string error;
    try {
      load_scenario_text(text, "options.json", "", {"training.fsdp_pad_copy=true", other}, catalog());
    } catch (const InputError& e) {
      error = e.what();
    }
    CHECK(error.find("/training/fsdp_pad_copy:") != std::string::npos);
  }
  // Not FSDP1: nothing.
  for (const char* other : {"training.framework=fsdp2", "training.framework=default", "parallel.zero=1"}) {
    CHECK(passes({other}).kernels == 0);
    CHECK(passes({other}).bytes_per_element == 0);
  }
  // In the plan: once per layer and micro-batch (32 / (8 x 2) = 2), before that layer's
  // reduce-scatter, over its parameters; the root unit (embedding and tied head) likewise.
  const Scenario s = load_scenario_text(text, "options.json", "", {}, catalog());
  const ProgramTemplate p = stage_program(text, {});
  const auto l23 = tasks_ending(p, "B L23 fsdp.grad.passes");
  REQUIRE(l23.size() == 2);
  CHECK(p.ops[p.tasks[l23[0]].ref].bytes == doctest::Approx(s.model.params_per_layer() * 19));
  const auto rs23 = tasks_ending(p, "B L23 dp.rs.grads");
  REQUIRE_FALSE(rs23.empty());
  const auto deps = p.deps_of(rs23.front());
  CHECK(std::find(deps.begin(), deps.end(), l23[0]) != deps.end());
  const auto outer = tasks_ending(p, "fsdp.grad.passes outer");
  REQUIRE(outer.size() == 2);
  CHECK(p.ops[p.tasks[outer[0]].ref].bytes == doctest::Approx(s.model.embedding_params() * 19));
  CHECK(tasks_ending(stage_program(text, {"training.framework=fsdp2"}), "fsdp.grad.passes").empty());
}

TEST_CASE("model.qkv_split: the eager lists cat dQ, dK and dV where the attention split a fused QKV output") {
  const std::string text = R"({
    "model": {"name": "mpt-like", "layers": 4, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 50368,
              "mlp": "gelu", "norm": "layernorm", "position": "learned", "qkv_split": true},
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"dp": 8, "zero": 3, "micro_batch": 2, "global_batch": 16},
    "training": {"seq_len": 2048, "precision": "bf16", "framework": "eager"}
  })";
  // Read + write of the QKV output (tokens x 3 x hidden, 2 B) in every layer's backward.
  const ProgramTemplate p = stage_program(text, {});
  const auto split = tasks_ending(p, "B L3 attn.qkv.split.bwd");
  REQUIRE(split.size() == 1);
  CHECK(p.ops[p.tasks[split[0]].ref].bytes == doctest::Approx(2.0 * 2048 * 3 * 2048 * 2 * 2));
  CHECK(tasks_ending(stage_program(text, {"model.qkv_split=false"}), "attn.qkv.split.bwd").empty());
  CHECK_FALSE(tasks_ending(stage_program(text, {"training.framework=fsdp2"}), "attn.qkv.split.bwd").empty());
  // The fused lists say nothing about their split: an input error naming the key, as is a
  // parallel block (its split is not modelled).
  for (const char* other :
       {"training.framework=default", "training.framework=torch-compile", "model.parallel_block=true"}) {
    std::string error;
    try {
      load_scenario_text(text, "options.json", "", {other}, catalog());
    } catch (const InputError& e) {
      error = e.what();
    }
    CHECK(error.find("options.json: /model/qkv_split:") != std::string::npos);
  }
}

TEST_CASE("interleaved 1F1B with uneven layer counts per chunk (Llama 3: one layer fewer on the first and last)") {
  // 30 layers on pp 4 x vpp 2 = 8 chunks: 3 + 6 x 4 + 3, as Llama 3 405B's 126 layers on 16 stages.
  const std::string text = R"({
    "model": {"name": "uneven", "layers": 30, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 32000,
              "position": "rope", "mlp": "swiglu", "norm": "rmsnorm"},
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "pp": 4, "vpp": 2, "schedule": "interleaved-1f1b", "micro_batch": 1, "global_batch": 16,
                 "stage_layers": [3, 4, 4, 4, 4, 4, 4, 3]},
    "training": {"seq_len": 2048, "precision": "bf16"}
  })";
  auto layers_on = [&](int stage) {
    const ProgramTemplate p = stage_program(text, {}, stage);
    std::vector<int> layers;
    for (int l = 0; l < 30; ++l) {
      if (!tasks_ending(p, "F L" + std::to_string(l) + " norm1").empty()) layers.push_back(l);
    }
    return layers;
  };
  CHECK(layers_on(0) == std::vector<int>{0, 1, 2, 15, 16, 17, 18});     // chunks 0 and 4
  CHECK(layers_on(3) == std::vector<int>{11, 12, 13, 14, 27, 28, 29});  // chunks 3 and 7
  // Interleaving shrinks the bubble against 1F1B over the same uneven stages (7 + 8 + 8 + 7).
  const double interleaved = run({}, text).iteration_time_s;
  const double plain =
      run({"parallel.vpp=1", "parallel.schedule=1f1b", "parallel.stage_layers=[7,8,8,7]"}, text).iteration_time_s;
  CHECK(interleaved < plain);
}

TEST_CASE("optimizers: LAMB and Adafactor steps and states against Adam's") {
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048, "precision": "bf16"}
  })";
  auto step_bytes = [&](const std::string& optimizer) {
    const ProgramTemplate p = stage_program(text, {"training.optimizer=" + optimizer});
    const auto t = tasks_ending(p, "optimizer.step");
    REQUIRE(t.size() == 1);
    return p.ops[p.tasks[t[0]].ref].bytes;
  };
  const double adam = step_bytes("adam"), lamb = step_bytes("lamb"), adafactor = step_bytes("adafactor");
  // Same extra passes (gradient copy, master-to-weight copy) for all; the updates
  // differ by 48 - 28 = 20 B (LAMB) and 84 - 28 = 56 B (Adafactor) per parameter.
  const double params = (lamb - adam) / 20;
  CHECK(params > 1e8);
  CHECK(adafactor - adam == doctest::Approx(56 * params).epsilon(1e-9));
  CHECK(step_bytes("sgd") == doctest::Approx(adam - 8 * params).epsilon(1e-9));
  // Unfused AdamW (Composer's DecoupledAdamW, op by op): 84 B, Adam's state.
  CHECK(step_bytes("adam-unfused") - adam == doctest::Approx(56 * params).epsilon(1e-9));
  // State: Adafactor keeps the fp32 master only (factored second moment), LAMB Adam's m and v.
  TrainingSpec tr;
  tr.optimizer = "adafactor";
  CHECK(optimizer_bytes_per_param(tr) == 4.0);
  tr.optimizer = "lamb";
  CHECK(optimizer_bytes_per_param(tr) == 12.0);
  tr.optimizer = "adam-unfused";
  CHECK(optimizer_bytes_per_param(tr) == 12.0);
  CHECK(run({"training.optimizer=adafactor"}, text).peak_memory_gib < run({}, text).peak_memory_gib);
}

TEST_CASE("host dispatch: a kernel shorter than its host issue cost waits for the host; a long one does not") {
  const Scenario s = load_scenario_text(kBase, "options.json", "", {}, catalog());
  const Cluster cluster(s.cluster);
  const ComputeCostModel costs(cluster, s.profiles);
  const double launch = costs.profile(0).launch_overhead.value;
  REQUIRE(launch == doctest::Approx(3e-6));  // the A100 profile's launch overhead
  // Ten 1 KiB memory-bound kernels: well under a microsecond of HBM time each.
  ComputeOp tiny;
  tiny.kind = OpKind::MemoryBound;
  tiny.bytes = 10 * 1024;
  tiny.kernels = 10;
  const double gpu = costs.seconds(tiny, 0);
  CHECK(gpu < 10 * (launch + 1e-6));
  tiny.host_dispatch_seconds = host_dispatch_seconds(Framework::Eager);
  CHECK(host_dispatch_seconds(Framework::Eager) == 3.34e-6);
  // Host-bound: 10 x (3 us launch + 3.34 us eager dispatch) = 63.4 us.
  CHECK(costs.seconds(tiny, 0) == doctest::Approx(63.4e-6).epsilon(1e-12));
  // A 4096^3 GEMM (milliseconds on the GPU) is unchanged, bit for bit.
  ComputeOp gemm;
  gemm.kind = OpKind::Gemm;
  gemm.m = gemm.n = gemm.k = 4096;
  gemm.flops = 2.0 * 4096 * 4096 * 4096;
  gemm.bytes = 3.0 * 4096 * 4096 * 2;
  const double gemm_gpu = costs.seconds(gemm, 0);
  gemm.host_dispatch_seconds = host_dispatch_seconds(Framework::Eager);
  CHECK(costs.seconds(gemm, 0) == gemm_gpu);
  // Frameworks: torch.compile and the default lists issue without the eager dispatcher.
  CHECK(host_dispatch_seconds(Framework::Default) == 0);
  CHECK(host_dispatch_seconds(Framework::TorchCompile) == 0);
  CHECK(host_dispatch_seconds(Framework::MegatronTe) == host_dispatch_seconds(Framework::Eager));
  CHECK(host_dispatch_seconds(Framework::DeepSpeed) == host_dispatch_seconds(Framework::Eager));
}

TEST_CASE("host dispatch in a plan: tiny kernels are host-bound, a large step is unchanged") {
  // megatron-te runs the default kernel lists (the base sets its attention) but for its loss
  // (Megatron-Core's cross-entropy, below) and its residual forks' gradient sums: otherwise
  // only host dispatch differs.
  // Without linear biases: Transformer Engine fuses the bias kernels the default lists run.
  const std::string no_bias = R"(model={"preset": "gpt3-1.3b", "bias": false})";
  const Scenario def = load_scenario_text(kBase, "options.json", "", {no_bias}, catalog());
  const Scenario te =
      load_scenario_text(kBase, "options.json", "", {no_bias, "training.framework=megatron-te"}, catalog());
  const Cluster cluster(def.cluster);
  const ComputeCostModel costs(cluster, def.profiles);
  auto plan = [&](const Scenario& s) { return plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{}); };
  const TrainingPlan pd = plan(def), pt = plan(te);
  const auto& od = pd.setup.programs.at(0).ops;
  const auto& ot = pt.setup.programs.at(0).ops;
  REQUIRE(od.size() == ot.size());
  const double issue = costs.profile(0).launch_overhead.value + host_dispatch_seconds(Framework::MegatronTe);
  for (std::size_t i = 0; i < od.size(); ++i) {
    CHECK(od[i].host_dispatch_seconds == 0);
    if (ot[i].name.rfind("loss.xent", 0) == 0) continue;
    // Megatron-Core's residual forks: autograd's sum of the two gradients (test below).
    if (ot[i].name.find("residual.bwd") != std::string::npos) continue;
    CHECK(costs.seconds(ot[i], 0) == std::max(costs.seconds(od[i], 0), ot[i].kernels * issue));
  }
  // Every kernel of this 1.3B step at 4096 tokens outlasts its host issue cost: the same
  // prediction without host dispatch.
  const Scenario te_no_host = load_scenario_text(
      kBase, "options.json", "", {no_bias, "training.framework=megatron-te", "training.host_dispatch_us=0"}, catalog());
  CHECK(simulate(te).iteration_time_s == simulate(te_no_host).iteration_time_s);
}

TEST_CASE("mlp relu: one activation kernel each way, the same steps as gelu; a bad kind names its pointer") {
  const std::string text = R"({
    "model": {"name": "relu-test", "layers": 2, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 50304},
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048}
  })";
  const ProgramTemplate gelu = stage_program(text, {"model.mlp=\"gelu\""});
  const ProgramTemplate relu = stage_program(text, {"model.mlp=\"relu\""});
  REQUIRE(relu.ops.size() == gelu.ops.size());
  for (std::size_t i = 0; i < relu.ops.size(); ++i) {
    CHECK(relu.ops[i].bytes == gelu.ops[i].bytes);
    CHECK(relu.ops[i].kernels == gelu.ops[i].kernels);
    CHECK(relu.ops[i].flops == gelu.ops[i].flops);
  }
  CHECK(tasks_ending(relu, "mlp.act").size() == tasks_ending(gelu, "mlp.act").size());
  std::string error;
  try {
    stage_program(text, {"model.mlp=\"silu\""});
  } catch (const std::exception& e) {
    error = e.what();
  }
  CHECK(error.find("/model/mlp") != std::string::npos);
}

TEST_CASE("FP32 and TF32 training: 4-byte activations, Megatron's unfused softmax falls back to torch ops") {
  const std::string text = R"({
    "model": {"name": "fp32-test", "layers": 4, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 50304},
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048, "precision": "bf16", "attention": "unfused"}
  })";
  const double scores = 2.0 * 8 * 2048 * 2048;  // micro-batch 2 x 8 heads per TP rank x 2048 x 2048
  const ProgramTemplate bf16 = stage_program(text, {});
  const ProgramTemplate tf32 = stage_program(text, {"training.precision=\"tf32\""});
  auto op_of = [](const ProgramTemplate& p, const std::string& name) -> const ComputeOp& {
    const auto t = tasks_ending(p, name);
    REQUIRE_FALSE(t.empty());
    return p.ops[p.tasks[t[0]].ref];
  };
  // 16-bit: Megatron's fused scale-mask-softmax, one kernel, read and write 2 B per score.
  CHECK(op_of(bf16, "attn.softmax").bytes == doctest::Approx(4.0 * scores));
  CHECK(op_of(bf16, "attn.softmax").kernels == 1);
  // FP32 scores: masked_fill_ and softmax, each reading and writing 4 B per score;
  // backward: softmax (12 B), the filled view's AsStridedBackward0 (zero-fill and
  // copy: 2 kernels, 12 B) and masked_fill_'s gradient through autograd's
  // CopySlices (the fill is in place on a view): 4 kernels of 8 B.
  CHECK(op_of(tf32, "attn.softmax").bytes == doctest::Approx(16.0 * scores));
  CHECK(op_of(tf32, "attn.softmax").kernels == 2);
  CHECK(op_of(tf32, "attn.softmax.bwd").bytes == doctest::Approx(56.0 * scores));
  CHECK(op_of(tf32, "attn.softmax.bwd").kernels == 7);
  // Megatron-DeepSpeed's unfused vocab-parallel cross-entropy: 32 B per fp32 logit
  // in 5 kernels (backward 8 B); 16-bit logits add the cast to fp32 and back.
  const double logits = 2.0 * 2048 * (50304 / 2);
  const ProgramTemplate ds32 = stage_program(text, {"training.precision=\"tf32\"", "training.framework=\"deepspeed\""});
  const ProgramTemplate ds16 = stage_program(text, {"training.framework=\"deepspeed\""});
  CHECK(op_of(ds32, "loss.xent").bytes == doctest::Approx(32.0 * logits));
  CHECK(op_of(ds32, "loss.xent").kernels == 5);
  CHECK(op_of(ds32, "loss.xent.bwd").bytes == doctest::Approx(8.0 * logits));
  CHECK(op_of(ds16, "loss.xent").bytes == doctest::Approx(38.0 * logits));
  CHECK(op_of(ds16, "loss.xent").kernels == 6);
  CHECK(op_of(ds16, "loss.xent.bwd").bytes == doctest::Approx(14.0 * logits));
  CHECK(op_of(tf32, "loss.xent").bytes == doctest::Approx(12.0 * logits));  // fused default
  CHECK(op_of(tf32, "attn.dropout").bytes == doctest::Approx(9.0 * scores));
  // Unfused attention copies its head-major context into token-major order for the
  // projection (Megatron's permute(2, 0, 1, 3).contiguous()): read + write per element of
  // the rank's [tokens, hidden / tp] output; a fused kernel writes token-major itself.
  const double context = 2.0 * 2048 * 2048 / 2;
  CHECK(op_of(bf16, "attn.context.copy").bytes == doctest::Approx(4.0 * context));
  CHECK(op_of(tf32, "attn.context.copy").bytes == doctest::Approx(8.0 * context));
  CHECK(tasks_ending(stage_program(text, {"training.attention=\"flash\""}), "attn.context.copy").empty());
  // GEMMs run in TF32 on 4-byte activations; the TP all-reduce carries 4-byte activations.
  CHECK(op_of(tf32, "mlp.up").dtype == Dtype::TF32);
  auto comm_bytes = [](const ProgramTemplate& p, const std::string& name) {
    const auto t = tasks_ending(p, name);
    REQUIRE_FALSE(t.empty());
    return p.tasks[t[0]].bytes;
  };
  const std::uint64_t act16 = comm_bytes(bf16, "tp.attn.out");
  CHECK(act16 == static_cast<std::uint64_t>(2.0 * 2048 * 2048 * 2));
  CHECK(comm_bytes(tf32, "tp.attn.out") == 2 * act16);
  CHECK(comm_bytes(stage_program(text, {"training.precision=\"fp32\""}), "tp.attn.out") == 2 * act16);
  // FP32 GEMMs run on the A100 profile's measured SGEMM curve (0.92-0.97 of the 19.5
  // TFLOP/s peak at this size: gpt3-1.3b's MLP up-projection, 8192 x 4096 x 2048), not at peak.
  const double up_flops = 2.0 * 8192 * 4096 * 2048;
  const double fp32_s = kernel_seconds({"training.precision=\"fp32\""}, "mlp.up");
  CHECK(fp32_s > up_flops / (0.97 * 19.5e12));
  CHECK(fp32_s < up_flops / (0.9 * 19.5e12));
  // FP32 training has no 16-bit weight copies: the eager framework casts nothing.
  CHECK_FALSE(tasks_ending(stage_program(text, {"training.framework=\"eager\""}), "amp.weight.cast").empty());
  CHECK(tasks_ending(stage_program(text, {"training.precision=\"fp32\"", "training.framework=\"eager\""}),
                     "amp.weight.cast")
            .empty());
}

namespace {

const char* kH100Fp8 = R"({
  "model": "gpt3-1.3b",
  "cluster": {"node": "dgx-h100", "nodes": 1},
  "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
  "training": {"seq_len": 2048, "precision": "fp8"}
})";

// The first op called `name` in stage 0's program of `text` with `sets` applied.
ComputeOp first_op(const std::string& text, const std::vector<std::string>& sets, const std::string& name) {
  const Scenario s = load_scenario_text(text, "options.json", "", sets, catalog());
  const Cluster cluster(s.cluster);
  const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{});
  for (const ComputeOp& op : plan.setup.programs.at(0).ops) {
    if (op.name == name) return op;
  }
  FAIL("no kernel " << name);
  return {};
}

std::string load_error(const std::string& text, const std::vector<std::string>& sets) {
  try {
    load_scenario_text(text, "options.json", "", sets, catalog());
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("FP8 recipes: each quantises a GEMM input with its own bytes and kernels") {
  // gpt3-1.3b, TP 2: the QKV GEMM's input is 2 x 2048 tokens x 2048 hidden per rank.
  const double elements = 2.0 * 2048 * 2048;
  const ComputeOp delayed = first_op(kH100Fp8, {}, "attn.qkv.fp8cast");
  // Delayed scaling (the default): one cast-transpose, read 2 B, write 1 + 1 B.
  CHECK(delayed.bytes == doctest::Approx(4 * elements));
  CHECK(delayed.kernels == 1);
  // Current scaling: an amax pass (read 2 B) and a scale kernel before the cast.
  const ComputeOp current = first_op(kH100Fp8, {"training.fp8_recipe=current"}, "attn.qkv.fp8cast");
  CHECK(current.bytes == doctest::Approx(6 * elements));
  CHECK(current.kernels == 3);
  // Float8BlockScaling on Hopper: two FP8 copies with one fp32 scale per 128 elements each.
  const ComputeOp block = first_op(kH100Fp8, {"training.fp8_recipe=blockwise"}, "attn.qkv.fp8cast");
  CHECK(block.bytes == doctest::Approx((2 + 2 * (1 + 4.0 / 128)) * elements));
  // The recipe moves only the quantisation: the iteration is longer with the amax pass.
  CHECK(run({"training.fp8_recipe=current"}, kH100Fp8).iteration_time_s > run({}, kH100Fp8).iteration_time_s);
  // Dgrad inputs (output gradients) are quantised too; weight-gradient GEMMs read the copies.
  CHECK(first_op(kH100Fp8, {"training.fp8_recipe=current"}, "mlp.down.dgrad.fp8cast").kernels == 3);
}

TEST_CASE("training.host_dispatch_us: the scenario's host time per kernel replaces the framework's") {
  auto host_times = [](const std::vector<std::string>& sets) {
    const Scenario s = load_scenario_text(kBase, "options.json", "", sets, catalog());
    const Cluster cluster(s.cluster);
    const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{});
    std::vector<double> hosts;
    for (const ComputeOp& op : plan.setup.programs.at(0).ops) hosts.push_back(op.host_dispatch_seconds);
    return hosts;
  };
  const std::vector<double> framework = host_times({"training.framework=deepspeed"});
  const std::vector<double> own = host_times({"training.framework=deepspeed", "training.host_dispatch_us=250"});
  REQUIRE(framework.size() == own.size());
  int issued = 0;
  for (std::size_t i = 0; i < own.size(); ++i) {
    if (framework[i] == 0) {
      CHECK(own[i] == 0);  // collectives and the optimizer step keep no host issue cost
      continue;
    }
    CHECK(framework[i] == host_dispatch_seconds(Framework::DeepSpeed));
    CHECK(own[i] == doctest::Approx(250e-6).epsilon(1e-12));
    ++issued;
  }
  CHECK(issued > 20);
  // At 250 us a kernel the host binds the small kernels of this step: the iteration grows.
  const double base = run({"training.framework=deepspeed"}).iteration_time_s;
  CHECK(run({"training.framework=deepspeed", "training.host_dispatch_us=250"}).iteration_time_s > 1.05 * base);
  CHECK(run({"training.framework=deepspeed", "training.host_dispatch_us=3.34"}).iteration_time_s == base);
  // Bad values are input errors at the key.
  CHECK(load_error(kBase, {"training.host_dispatch_us=-1"}).find("options.json: /training/host_dispatch_us:") !=
        std::string::npos);
  CHECK(load_error(kBase, {"training.host_dispatch_us=\"fast\""}).find("/training/host_dispatch_us:") !=
        std::string::npos);
}

TEST_CASE(
    "training.launch_blocking: each kernel's round trip, host dispatch and kernel-less calls add to its GPU time; no "
    "overlap is allowed") {
  // Without the slowest-GPU factor (docs/calibration.md): the formulas below are one median GPU's.
  const Scenario s = load_scenario_text(kBase, "options.json", "", {"cluster.gpu_speed_spread=0"}, catalog());
  const Cluster cluster(s.cluster);
  const ComputeCostModel costs(cluster, s.profiles);
  const double host = host_dispatch_seconds(Framework::DeepSpeed);
  // A 4096^3 GEMM hides its host issue behind the GPU when launches are asynchronous...
  ComputeOp gemm;
  gemm.kind = OpKind::Gemm;
  gemm.m = gemm.n = gemm.k = 4096;
  gemm.flops = 2.0 * 4096 * 4096 * 4096;
  gemm.bytes = 3.0 * 4096 * 4096 * 2;
  gemm.kernels = 2;
  gemm.host_dispatch_seconds = host;
  const double async = costs.seconds(gemm, 0);
  // Kernel-less dispatcher calls hide behind the GPU as well when launches are asynchronous.
  gemm.host_ops = 5;
  CHECK(costs.seconds(gemm, 0) == async);
  // ...and pays it in full when each launch waits for its kernel: per kernel the launch and
  // synchronise round trip (9.6 - 2.9 us, NVIDIA's CUDA graphs blog) instead of the A100
  // profile's 3 us launch gap, and 3.34 us of dispatch for each of the 2 kernels and 5 calls.
  gemm.launch_blocking = true;
  CHECK(kSyncLaunchSeconds == doctest::Approx(6.7e-6).epsilon(1e-12));
  CHECK(costs.seconds(gemm, 0) == doctest::Approx(async + 2 * (6.7e-6 - 3e-6) + 7 * 3.34e-6).epsilon(1e-12));
  gemm.host_ops = 0;
  CHECK(costs.seconds(gemm, 0) == doctest::Approx(async + 2 * (6.7e-6 - 3e-6) + 2 * 3.34e-6).epsilon(1e-12));
  // The layer's Python beyond the dispatcher: 3 nn.Module calls at 2.17 us (pytorch pull 50431),
  // 4 recorded autograd nodes at 1.8 us (issue 41383), one torch.autograd.backward call at
  // 31.3 us (issue 44484) and 2 NCCL launches, each a round trip and a dispatch; hidden
  // behind the GPU when launches are asynchronous.
  const double blocking_base = costs.seconds(gemm, 0);
  gemm.module_calls = 3;
  gemm.autograd_records = 4;
  gemm.backward_calls = 1;
  gemm.comm_launches = 2;
  CHECK(kModuleCallSeconds == doctest::Approx(2.17e-6).epsilon(1e-12));
  CHECK(kAutogradRecordSeconds == doctest::Approx(1.8e-6).epsilon(1e-12));
  CHECK(kBackwardCallSeconds == doctest::Approx(31.3e-6).epsilon(1e-12));
  CHECK(costs.seconds(gemm, 0) ==
        doctest::Approx(blocking_base + 3 * 2.17e-6 + 4 * 1.8e-6 + 31.3e-6 + 2 * (6.7e-6 + 3.34e-6)).epsilon(1e-12));
  gemm.launch_blocking = false;
  CHECK(costs.seconds(gemm, 0) == async);
  gemm.launch_blocking = true;
  gemm.module_calls = gemm.autograd_records = gemm.backward_calls = gemm.comm_launches = 0;
  // Without host dispatch (the default lists) blocking changes nothing.
  gemm.host_dispatch_seconds = 0;
  CHECK(costs.seconds(gemm, 0) == doctest::Approx(async).epsilon(1e-12));

  // In a plan: every issued kernel carries the flag, and the iteration grows.
  const std::vector<std::string> serial = {"training.framework=deepspeed", "parallel.dp_overlap=false",
                                           "parallel.tp_grad_overlap=false", "parallel.pp_overlap=false"};
  std::vector<std::string> blocking = serial;
  blocking.push_back("training.launch_blocking=true");
  const Scenario b = load_scenario_text(kBase, "options.json", "", blocking, catalog());
  const TrainingPlan plan = plan_training(b.model, b.parallel, b.training, Cluster(b.cluster), PlanOptions{});
  int flagged = 0;
  for (const ComputeOp& op : plan.setup.programs.at(0).ops) {
    CHECK(op.launch_blocking == (op.host_dispatch_seconds > 0));
    flagged += op.launch_blocking ? 1 : 0;
  }
  CHECK(flagged > 20);
  CHECK(run(blocking).iteration_time_s > run(serial).iteration_time_s);

  // Megatron-DeepSpeed's layer with unfused attention: 19 kernel-less calls on its forward's
  // first kernel (16 views, 2 around the fused softmax, the scores' torch.empty) and 15 on
  // its backward's (the views' autograd nodes); none with flash attention or other lists.
  auto host_ops = [&](std::vector<std::string> sets) {
    const Scenario h = load_scenario_text(kBase, "options.json", "", sets, catalog());
    const ModelSteps steps = build_model_steps(h.model, h.parallel, h.training);
    const LayerSteps& dense = steps.by_kind[static_cast<std::size_t>(LayerKind::Dense)];
    int fwd = 0, bwd = 0;
    for (const Step& st : dense.forward) fwd += st.is_comm ? 0 : st.op.host_ops;
    for (const Step& st : dense.backward) bwd += st.is_comm ? 0 : st.op.host_ops;
    return std::pair<int, int>(fwd, bwd);
  };
  std::vector<std::string> unfused = blocking;
  unfused.push_back("training.attention=unfused");
  CHECK(host_ops(unfused) == std::pair<int, int>(19, 15));
  CHECK(host_ops(blocking) == std::pair<int, int>(0, 0));

  // The rest of the layer's Python (Megatron-DeepSpeed's ParallelTransformerLayerPipe under
  // DeepSpeed's CheckpointFunction): 11 nn.Module calls per forward and recomputation; with
  // full recomputation the forward records no autograd node, the recomputation one per op
  // (kernels, kernel-less calls, collectives), and the backward calls torch.autograd.backward
  // once; each pass launches its TP all-reduces (2 with TP 2) blocking.
  struct Work {
    int modules = 0, records = 0, backward_calls = 0, comms = 0, ops = 0;
  };
  auto work = [](const std::vector<Step>& steps) {
    Work w;
    for (const Step& st : steps) {
      if (st.is_comm) continue;
      w.modules += st.op.module_calls;
      w.records += st.op.autograd_records;
      w.backward_calls += st.op.backward_calls;
      w.comms += st.op.comm_launches;
      w.ops += st.op.kernels + st.op.host_ops;
    }
    return w;
  };
  auto layer = [&](std::vector<std::string> sets) {
    const Scenario h = load_scenario_text(kBase, "options.json", "", sets, catalog());
    const ModelSteps steps = build_model_steps(h.model, h.parallel, h.training);
    return steps.by_kind[static_cast<std::size_t>(LayerKind::Dense)];
  };
  std::vector<std::string> checkpointed = unfused;
  checkpointed.push_back("parallel.recompute=\"full\"");
  const LayerSteps full = layer(checkpointed);
  const Work fwd = work(full.forward), rec = work(full.recompute), bwd = work(full.backward);
  CHECK(fwd.modules == 11);
  CHECK(fwd.records == 0);
  CHECK(fwd.comms == 2);
  CHECK(rec.modules == 11);
  CHECK(rec.records == rec.ops + 2);
  CHECK(rec.comms == 2);
  CHECK(bwd.modules == 0);
  CHECK(bwd.records == 0);
  CHECK(bwd.backward_calls == 1);
  CHECK(bwd.comms == 2);
  // Without recomputation the forward records its graph and no backward call is made.
  const LayerSteps plain = layer(unfused);
  CHECK(work(plain.forward).records == work(plain.forward).ops + 2);
  CHECK(work(plain.backward).backward_calls == 0);
  // Flash attention (another code path) carries none.
  const Work flash = work(layer(blocking).forward);
  CHECK(flash.modules + flash.records + flash.comms == 0);

  unfused.push_back("training.framework=eager");
  CHECK(host_ops(unfused) == std::pair<int, int>(0, 0));
  // They lengthen a blocking iteration: the same plan with them removed is faster.
  unfused.pop_back();
  const Scenario u = load_scenario_text(kBase, "options.json", "", unfused, catalog());
  const Cluster uc(u.cluster);
  const ComputeCostModel ucosts(uc, u.profiles);
  const TrainingPlan uplan = plan_training(u.model, u.parallel, u.training, uc, PlanOptions{});
  double with_calls = 0, without_calls = 0;
  double without_python = 0;
  for (ComputeOp op : uplan.setup.programs.at(0).ops) {
    with_calls += ucosts.seconds(op, 0);
    op.module_calls = op.autograd_records = op.backward_calls = op.comm_launches = 0;
    without_python += ucosts.seconds(op, 0);
    op.host_ops = 0;
    without_calls += ucosts.seconds(op, 0);
  }
  CHECK(with_calls > without_python);
  CHECK(without_python > without_calls);

  // Overlapped communication cannot run beside a blocking launch: an input error naming the key.
  std::string e = load_error(kBase, {"training.launch_blocking=true"});
  CHECK(e.find("options.json: /training/launch_blocking:") != std::string::npos);
  CHECK(e.find("parallel.dp_overlap") != std::string::npos);
  CHECK(e.find("parallel.pp_overlap") != std::string::npos);
  blocking.push_back("training.cuda_graphs=\"layers\"");
  CHECK(load_error(kBase, blocking).find("not CUDA graphs") != std::string::npos);
  CHECK(load_error(kBase, {"training.launch_blocking=1"}).find("/training/launch_blocking:") != std::string::npos);
}

TEST_CASE("FP8 recipes: MXFP8 needs Blackwell, block scaling Hopper or Blackwell, any recipe FP8 precision") {
  std::string e = load_error(kH100Fp8, {"training.fp8_recipe=mxfp8"});
  CHECK(e.find("options.json: /training/fp8_recipe:") != std::string::npos);
  CHECK(e.find("H100-SXM-80GB is hopper") != std::string::npos);
  e = load_error(kH100Fp8, {"training.fp8_recipe=current", "training.precision=bf16"});
  CHECK(e.find("/training/fp8_recipe: an FP8 scaling recipe needs \"precision\": \"fp8\"") != std::string::npos);
  CHECK(load_error(kH100Fp8, {"training.fp8_recipe=blockwise"}).empty());
  // On B200 MXFP8 is accepted: 1x32 blocks with an E8M0 scale byte, row-wise and column-wise.
  const std::vector<std::string> b200{"cluster.node=dgx-b200", "training.fp8_recipe=mxfp8"};
  CHECK(load_error(kH100Fp8, b200).empty());
  CHECK(first_op(kH100Fp8, b200, "attn.qkv.fp8cast").bytes == doctest::Approx((2 + 2 * (1 + 1.0 / 32)) * 8388608.0));
}

TEST_CASE("CUDA graphs: captured kernels pay the graph's per-kernel cost and no host dispatch") {
  // One median GPU's costs, without the slowest-GPU factor (docs/calibration.md).
  const Scenario s = load_scenario_text(kBase, "options.json", "", {"cluster.gpu_speed_spread=0"}, catalog());
  const Cluster cluster(s.cluster);
  const ComputeCostModel costs(cluster, s.profiles);
  // Ten small memory-bound kernels issued from eager PyTorch are host-bound (63.4 us,
  // the host dispatch test); in a graph they cost their HBM time plus 10 x 0.5 us.
  ComputeOp tiny;
  tiny.kind = OpKind::MemoryBound;
  tiny.bytes = 10 * 1024;
  tiny.kernels = 10;
  const double eager_gpu = costs.seconds(tiny, 0);
  const double hbm = eager_gpu - 10 * costs.profile(0).launch_overhead.value;
  tiny.host_dispatch_seconds = host_dispatch_seconds(Framework::Eager);
  tiny.graph_captured = true;
  CHECK(kGraphKernelSeconds == 0.5e-6);
  CHECK(costs.seconds(tiny, 0) == doctest::Approx(hbm + 10 * kGraphKernelSeconds).epsilon(1e-9));

  // In a plan: "layers" captures the transformer layers only, "full" the embedding and head too.
  const std::vector<std::string> te{"training.framework=megatron-te"};
  auto with = [&](const std::string& scope) {
    std::vector<std::string> v = te;
    v.push_back("training.cuda_graphs=" + scope);
    return v;
  };
  CHECK_FALSE(first_op(kBase, te, "mlp.act").graph_captured);
  CHECK(first_op(kBase, with("layers"), "mlp.act").graph_captured);
  CHECK(first_op(kBase, with("layers"), "attn.core.bwd").graph_captured);
  CHECK_FALSE(first_op(kBase, with("layers"), "embed.lookup").graph_captured);
  CHECK(first_op(kBase, with("full"), "embed.lookup").graph_captured);
  // Every kernel gets shorter (3 us eager launches become 0.5 us nodes), so the step does.
  const double none = run(te).iteration_time_s, layers = run(with("layers")).iteration_time_s;
  CHECK(layers < none);
  CHECK(run(with("full")).iteration_time_s <= layers);
}

TEST_CASE("sliding-window attention: the fused kernels compute only the pairs inside the window") {
  const std::string text = R"({
    "model": {"name": "window-test", "layers": 4, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
              "vocab": 32000, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "max_seq_len": 8192},
    "cluster": {"node": "dgx-h200", "nodes": 1},
    "parallel": {"tp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64},
    "training": {"seq_len": 8192, "precision": "bf16", "dropout": false}
  })";
  const std::vector<std::string> w{"model.sliding_window=4096"};
  // Query i attends to min(i + 1, 4096) keys: 8192 x 4096 - 4096 x 4095 / 2 pairs of 8192 x 8193 / 2.
  const double share = (8192.0 * 4096 - 4096.0 * 4095 / 2) / (8192.0 * 8193 / 2);
  CHECK(first_op(text, w, "attn.core").flops == doctest::Approx(first_op(text, {}, "attn.core").flops * share));
  CHECK(first_op(text, w, "attn.core.bwd").flops == doctest::Approx(first_op(text, {}, "attn.core.bwd").flops * share));
  CHECK(first_op(text, w, "mlp.up").flops == first_op(text, {}, "mlp.up").flops);
  CHECK(run(w, text).iteration_time_s < run({}, text).iteration_time_s);
  // Model FLOPs count 4096 keys per query instead of 8192.
  const Scenario full = load_scenario_text(text, "options.json", "", {}, catalog());
  const Scenario windowed = load_scenario_text(text, "options.json", "", w, catalog());
  CHECK(model_flops_per_iteration(windowed.model, windowed.training, 64) <
        model_flops_per_iteration(full.model, full.training, 64));
  // A window as long as the sequence changes nothing; unfused attention masks the full scores.
  CHECK(run({"model.sliding_window=8192"}, text).iteration_time_s == run({}, text).iteration_time_s);
  const std::vector<std::string> unfused{"training.attention=unfused"};
  std::vector<std::string> unfused_w = unfused;
  unfused_w.push_back("model.sliding_window=4096");
  CHECK(first_op(text, unfused_w, "attn.qk").flops == first_op(text, unfused, "attn.qk").flops);
}

TEST_CASE("parallel attention + MLP block: one fused input GEMM and one TP reduction per layer and pass") {
  const std::string text = R"({
    "model": {"name": "parallel-test", "layers": 4, "hidden": 4096, "heads": 32, "ffn_hidden": 16384,
              "vocab": 50304, "position": "rope"},
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 4, "dp": 2, "micro_batch": 2, "global_batch": 32},
    "training": {"seq_len": 2048, "precision": "bf16"}
  })";
  const std::vector<std::string> par{"model.parallel_block=true"};
  const ProgramTemplate seq = stage_program(text, {}), pb = stage_program(text, par);
  const std::size_t seq_fwd = tasks_ending(seq, "tp.attn.out").size() + tasks_ending(seq, "tp.mlp.out").size();
  const std::size_t seq_bwd = tasks_ending(seq, "tp.attn.in.grad").size() + tasks_ending(seq, "tp.mlp.in.grad").size();
  REQUIRE(seq_fwd > 0);
  CHECK(tasks_ending(pb, "tp.attn.out").empty());
  CHECK(2 * tasks_ending(pb, "tp.block.out").size() == seq_fwd);
  CHECK(2 * tasks_ending(pb, "tp.block.in.grad").size() == seq_bwd);
  // The fused input projection does the QKV and MLP-up GEMMs' work in one.
  CHECK(first_op(text, par, "block.in").flops ==
        doctest::Approx(first_op(text, {}, "attn.qkv").flops + first_op(text, {}, "mlp.up").flops));
  CHECK(run(par, text).iteration_time_s < run({}, text).iteration_time_s);
  // Routed experts keep the sequential block.
  CHECK(load_error(R"({"model": {"name": "m", "layers": 2, "hidden": 1024, "heads": 8, "ffn_hidden": 4096,
      "vocab": 1000, "parallel_block": true, "moe": {"experts": 8, "top_k": 2, "expert_ffn": 1024}},
      "cluster": {"node": "dgx-a100", "nodes": 1}, "parallel": {"tp": 1, "dp": 8, "global_batch": 8},
      "training": {"seq_len": 1024}})",
                   {})
            .find("/model/parallel_block:") != std::string::npos);
}

TEST_CASE("distributed checkpoints: full recomputation keeps 1/tp of each layer input and gathers it back") {
  const std::vector<std::string> full{"parallel.recompute=full"};
  std::vector<std::string> dist = full;
  dist.push_back("parallel.distribute_saved_activations=true");
  CHECK(tasks_ending(stage_program(kBase, full), "tp.ag.checkpoint").empty());
  CHECK_FALSE(tasks_ending(stage_program(kBase, dist), "tp.ag.checkpoint").empty());
  const JobReport a = run(full), b = run(dist);
  CHECK(b.per_stage.at(0).memory.activations < a.per_stage.at(0).memory.activations);
  CHECK(b.iteration_time_s > a.iteration_time_s);
  // Megatron-LM refuses it without full recomputation or with sequence parallelism.
  CHECK(load_error(kBase, {"parallel.distribute_saved_activations=true"})
            .find("/parallel/distribute_saved_activations:") != std::string::npos);
  dist.push_back("parallel.sequence_parallel=true");
  CHECK_FALSE(load_error(kBase, dist).empty());
}

TEST_CASE("Muon: Newton-Schulz GEMMs per weight matrix, momentum-only state, AdamW for embedding and head") {
  const std::vector<std::string> muon{"training.optimizer=muon"};
  // gpt3-1.3b on TP 2: the local QKV matrix is 3 x 1024 rows by 2048 columns, 24 layers,
  // five iterations of 4 m^2 n + 2 m^3 with m = 2048, n = 3072.
  const ComputeOp qkv = first_op(kBase, muon, "optimizer.muon.qkv");
  CHECK(qkv.flops == doctest::Approx(5.0 * 24 * (4.0 * 2048 * 2048 * 3072 + 2.0 * 2048 * 2048 * 2048)));
  CHECK(qkv.kernels == 3 * 5 * 24);
  CHECK(first_op(kBase, muon, "optimizer.muon.mlp.down").k == 4096);  // 8192 / 2 columns by 2048 rows
  const JobReport adam = run({}), m = run(muon);
  CHECK(m.iteration_time_s > adam.iteration_time_s);
  CHECK(m.per_stage.at(0).memory.optimizer < adam.per_stage.at(0).memory.optimizer);
  // State: 8 B per matrix parameter, 12 B for the embedding (AdamW).
  TrainingSpec tr;
  tr.optimizer = "muon";
  CHECK(optimizer_bytes_per_param(tr) == 8.0);
  // ZeRO-1: Distributed Muon gathers the sharded gradients of the layers first.
  std::vector<std::string> zero1 = muon;
  zero1.push_back("parallel.zero=1");
  CHECK_FALSE(tasks_ending(stage_program(kBase, zero1), "optimizer.muon.gather").empty());
  CHECK(tasks_ending(stage_program(kBase, muon), "optimizer.muon.gather").empty());
}

TEST_CASE("Megatron-Core's cross-entropy: unfused in fp32 by default, three compiled passes with the fusion") {
  // megatron/core/tensor_parallel/cross_entropy.py (core_r0.8.0): cast, max, subtract,
  // exp, sum and div over the fp32 logits; fused_cross_entropy.py: three torch.compile'd
  // functions, each at least a pass (docs/frameworks.md, "Cross-entropy").
  const std::string text = R"({
    "model": {"name": "xent-test", "layers": 2, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 50304},
    "cluster": {"node": "dgx-h100", "nodes": 1},
    "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048, "precision": "bf16", "attention": "flash", "framework": "megatron-te"}
  })";
  const double logits = 2.0 * 2048 * (50304 / 2);
  auto op_of = [](const ProgramTemplate& p, const std::string& name) -> const ComputeOp& {
    const auto t = tasks_ending(p, name);
    REQUIRE_FALSE(t.empty());
    return p.ops[p.tasks[t[0]].ref];
  };
  const ProgramTemplate unfused = stage_program(text, {});
  CHECK(op_of(unfused, "loss.xent").bytes == doctest::Approx(38.0 * logits));
  CHECK(op_of(unfused, "loss.xent").kernels == 6);
  CHECK(op_of(unfused, "loss.xent.bwd").bytes == doctest::Approx(14.0 * logits));
  CHECK(op_of(unfused, "loss.xent.bwd").kernels == 3);
  const ProgramTemplate fused = stage_program(text, {"training.cross_entropy_loss_fusion=true"});
  CHECK(op_of(fused, "loss.xent").bytes == doctest::Approx(22.0 * logits));
  CHECK(op_of(fused, "loss.xent").kernels == 3);
  CHECK(op_of(fused, "loss.xent.bwd").bytes == doctest::Approx(6.0 * logits));
  CHECK(op_of(fused, "loss.xent.bwd").kernels == 1);
  // FP32 logits need no cast: the first compiled function only reads them for the max.
  const ProgramTemplate fused32 =
      stage_program(text, {"training.cross_entropy_loss_fusion=true", "training.precision=\"tf32\""});
  CHECK(op_of(fused32, "loss.xent").bytes == doctest::Approx(20.0 * logits));
  // The default lists keep their one fused pass; the rest of the step is the same.
  const ProgramTemplate def = stage_program(text, {"training.framework=\"default\""});
  CHECK(op_of(def, "loss.xent").bytes == doctest::Approx(10.0 * logits));
  CHECK(op_of(def, "mlp.up").flops == op_of(unfused, "mlp.up").flops);
  // A setting of Megatron-Core only: with another framework's lists it is an input error.
  const std::string e = load_error(text, {"training.framework=\"eager\"", "training.cross_entropy_loss_fusion=true"});
  CHECK(e.find("options.json: /training/cross_entropy_loss_fusion:") != std::string::npos);
  CHECK(e.find("megatron-te") != std::string::npos);
  CHECK(load_error(text, {"training.cross_entropy_loss_fusion=1"}).find("/training/cross_entropy_loss_fusion:") !=
        std::string::npos);
}

TEST_CASE("FP8 recipes and the NeMo 24.07 runs: the quantisation is about a tenth of the kernel time, any recipe") {
  // docs/validation.md: NeMo 24.07 trains with delayed scaling; current scaling's extra amax
  // pass (charged at the cast-transpose's measured rate) would add under 10% to GPT3-5B on
  // 64 H100.
  const std::string file =
      std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/validation/nemo2407_h100_fp8_GPT3-5B_64gpu.json";
  const Scenario delayed = load_scenario_file(file, {}, catalog());
  REQUIRE(delayed.training.fp8_recipe == Fp8Recipe::Delayed);
  const Scenario current = load_scenario_file(file, {"training.fp8_recipe=current"}, catalog());
  const double t_delayed = simulate(delayed).iteration_time_s, t_current = simulate(current).iteration_time_s;
  CHECK(t_current > t_delayed);
  CHECK(t_current < 1.10 * t_delayed);
  // The casts' share of the stage's kernel time: 8-14% (about 10% with delayed scaling, whose
  // LayerNormLinear inputs arrive in FP8 from the norm; 6.3% at the memory-bound curve, before
  // Transformer Engine's measured cast-transpose rate, docs/calibration.md).
  const Cluster cluster(delayed.cluster);
  const ComputeCostModel costs(cluster, delayed.profiles);
  const TrainingPlan plan = plan_training(delayed.model, delayed.parallel, delayed.training, cluster, PlanOptions{});
  const ProgramTemplate& prog = plan.setup.programs.at(0);
  double all = 0, casts = 0;
  for (const Task& t : prog.tasks) {
    if (t.kind != TaskKind::Compute) continue;
    const ComputeOp& op = prog.ops[t.ref];
    const double s = costs.seconds(op, 0);
    all += s;
    if (op.name.find(".fp8cast") != std::string::npos) casts += s;
  }
  CHECK(casts / all > 0.08);
  CHECK(casts / all < 0.14);
}

TEST_CASE("FP8 weight casts: Transformer Engine quantises each layer's weights once per step, not per micro-batch") {
  // docs/frameworks.md, "FP8 weight casts": Megatron-Core marks the step's first micro-batch
  // (is_first_microbatch), on which TE casts every GEMM weight to FP8 with its transpose.
  const std::string file =
      std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/validation/nemo2407_h100_fp8_GPT3-5B_64gpu.json";
  const Scenario s = load_scenario_file(file, {}, catalog());
  REQUIRE(s.training.framework == Framework::MegatronTe);
  const Cluster cluster(s.cluster);
  const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{});
  const ProgramTemplate& prog = plan.setup.programs.at(0);
  const ModelSteps steps = build_model_steps(s.model, s.parallel, s.training);
  const double layer_params = steps.of(LayerKind::Dense).grad_elements;
  int casts = 0;
  for (const Task& t : prog.tasks) {
    if (t.kind != TaskKind::Compute) continue;
    const ComputeOp& op = prog.ops[t.ref];
    if (op.name != "fp8.weight.cast") continue;
    ++casts;
    CHECK(t.microbatch == 0);                              // the first micro-batch only (8 run per step)
    CHECK(op.bytes == doctest::Approx(4 * layer_params));  // read 2 B, write FP8 + its transpose
    CHECK(op.kernels == 4);                                // QKV, projection, MLP input and output
  }
  CHECK(casts == s.model.layers);
  // Not in BF16, and not where no TE module keeps the FP8 copy.
  for (const char* set : {"training.precision=bf16", "training.framework=default"}) {
    const Scenario o = load_scenario_file(file, {set}, catalog());
    const TrainingPlan p = plan_training(o.model, o.parallel, o.training, cluster, PlanOptions{});
    for (const ComputeOp& op : p.setup.programs.at(0).ops) CHECK(op.name != "fp8.weight.cast");
  }
  CHECK(fp8_weight_cast(s.training).bytes_per_element == 4);
  TrainingSpec current = s.training;
  current.fp8_recipe = Fp8Recipe::Current;
  CHECK(fp8_weight_cast(current).bytes_per_element == 6);  // the recipe's amax pass as well
  CHECK(fp8_weight_cast(current).kernels_per_layer == 12);
}

TEST_CASE("NeMo's distributed Adam: a bucket per layer, everything outside the layers in the first layer's") {
  // docs/frameworks.md, "NeMo's distributed Adam": Nemotron-8B's untied output layer is
  // reduce-scattered with layer 0 after the embedding's backward, and gathered first.
  const std::string file =
      std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/validation/nemo2407_h100_fp8_Nemotron-8B_64gpu.json";
  const Scenario s = load_scenario_file(file, {}, catalog());
  REQUIRE(s.training.apex_distributed_adam);
  const Scenario m = load_scenario_file(file, {"training.apex_distributed_adam=false"}, catalog());
  const Cluster cluster(s.cluster);
  const ModelSteps steps = build_model_steps(s.model, s.parallel, s.training);
  const double layer = steps.of(LayerKind::Dense).grad_elements;
  const double outside = steps.embedding_grad_elements + steps.head_grad_elements;
  REQUIRE(steps.head_grad_elements > layer);  // 256k x 4096 / tp 2 against one layer
  auto dp = [&cluster](const Scenario& sc, CollectiveKind kind) {
    const TrainingPlan plan = plan_training(sc.model, sc.parallel, sc.training, cluster, PlanOptions{});
    std::vector<double> bytes;
    for (const Task& t : plan.setup.programs.at(0).tasks)
      if (t.kind == TaskKind::Collective && t.comm_class == CommClass::DP && t.collective == kind)
        bytes.push_back(static_cast<double>(t.bytes));
    return bytes;
  };
  const std::vector<double> rs = dp(s, CollectiveKind::ReduceScatter), ag = dp(s, CollectiveKind::AllGather);
  REQUIRE(rs.size() == static_cast<std::size_t>(s.model.layers));
  for (std::size_t i = 0; i + 1 < rs.size(); ++i) CHECK(rs[i] == doctest::Approx(4 * layer).epsilon(1e-6));
  CHECK(rs.back() == doctest::Approx(4 * (layer + outside)).epsilon(1e-6));  // fp32 gradients
  REQUIRE(ag.size() == static_cast<std::size_t>(s.model.layers));
  CHECK(ag.front() == doctest::Approx(2 * (layer + outside)).epsilon(1e-6));  // bf16 parameters
  // Megatron-Core's size-based buckets reduce the output layer's gradients first, as they come.
  const std::vector<double> rs_m = dp(m, CollectiveKind::ReduceScatter);
  CHECK(rs_m.front() >= 4 * steps.head_grad_elements);
  // Both layouts reduce and gather every parameter once, the output layer included.
  auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  CHECK(sum(rs_m) == doctest::Approx(sum(rs)).epsilon(1e-9));
  CHECK(sum(dp(m, CollectiveKind::AllGather)) == doctest::Approx(sum(ag)).epsilon(1e-9));
  CHECK(simulate(s).iteration_time_s != simulate(m).iteration_time_s);
  // Only for a sharded optimizer with overlap, without virtual pipeline stages, on
  // Megatron's kernel lists and one model chunk per rank.
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"parallel.zero=0"}, {"parallel.dp_overlap=false"}, {"parallel.schedule=\"dualpipe-v\""}}) {
    CAPTURE(bad.front());
    std::string error;
    try {
      load_scenario_file(file, bad, catalog());
    } catch (const InputError& e) {
      error = e.what();
    }
    CHECK(error.find("/training/apex_distributed_adam") != std::string::npos);
  }
  std::string eager;
  try {
    load_scenario_file(std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/validation/nemo2407_h100_fp8_GPT3-5B_64gpu.json",
                       {"training.framework=\"eager\""}, catalog());
  } catch (const InputError& e) {
    eager = e.what();
  }
  CHECK(
      eager.find("/training/apex_distributed_adam: NeMo's DistributedFusedAdam buckets are modelled with Megatron's") !=
      std::string::npos);
}

TEST_CASE("FP8 backward GEMMs run with the split accumulator, forward GEMMs with fast accumulation") {
  // Transformer Engine's _2X_ACC_DGRAD / _2X_ACC_WGRAD: the dgrad and wgrad GEMMs of an FP8
  // run cost 1 / fp8_split_accumulator_speed of the fast-accumulation curve (docs/frameworks.md).
  const std::string file =
      std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/validation/nemo2407_h100_fp8_GPT3-5B_64gpu.json";
  const Scenario s = load_scenario_file(file, {}, catalog());
  const Cluster cluster(s.cluster);
  const ComputeCostModel costs(cluster, s.profiles);
  const double speed = s.profiles.at(0).fp8_split_accumulator_speed.value;
  CHECK(speed == doctest::Approx(0.87));
  const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{});
  const ProgramTemplate& prog = plan.setup.programs.at(0);
  auto op_named = [&prog](const std::string& name) {
    for (const ComputeOp& op : prog.ops)
      if (op.name == name) return op;
    FAIL("no op " << name);
    return ComputeOp{};
  };
  // The three GEMMs of the MLP up-projection do the same FLOPs (8192 x 16384 x 4096).
  const ComputeOp fwd = op_named("mlp.up"), dgrad = op_named("mlp.up.dgrad"), wgrad = op_named("mlp.up.wgrad");
  CHECK_FALSE(fwd.split_accumulator);
  CHECK(dgrad.split_accumulator);
  CHECK(wgrad.split_accumulator);
  REQUIRE(dgrad.flops == fwd.flops);
  const double launch = s.profiles.at(0).launch_overhead.value;
  const double t_fwd = costs.seconds(fwd, 0) - launch;
  CHECK(costs.seconds(dgrad, 0) - launch == doctest::Approx(t_fwd / speed));
  CHECK(costs.seconds(wgrad, 0) - launch == doctest::Approx(t_fwd / speed));
  // The LM head stays in BF16: no split accumulator there.
  CHECK_FALSE(op_named("head.dgrad").split_accumulator);
  // The same scenario in BF16 has no split-accumulator GEMM at all.
  const Scenario bf16 = load_scenario_file(file, {"training.precision=bf16"}, catalog());
  const TrainingPlan plan16 = plan_training(bf16.model, bf16.parallel, bf16.training, cluster, PlanOptions{});
  for (const ComputeOp& op : plan16.setup.programs.at(0).ops) CHECK_FALSE(op.split_accumulator);
}

TEST_CASE("activation offload: offloaded layers leave GPU memory, their copies overlap compute over the host link") {
  // gpt3-1.3b, 24 layers on one stage: 20 of them offloaded.
  const std::vector<std::string> off{"parallel.activation_offload_layers=20"};
  const ProgramTemplate p = stage_program(kBase, off);
  // One copy out and one back per offloaded layer and micro-batch (8 micro-batches of 2 sequences).
  CHECK(tasks_ending(p, "offload.d2h").size() == 20 * 8);
  CHECK(tasks_ending(p, "offload.h2d").size() == 20 * 8);
  const JobReport base = run({}), with = run(off);
  const MemoryBreakdown &m0 = base.per_stage.at(0).memory, &m1 = with.per_stage.at(0).memory;
  CHECK(m1.activations < 0.5 * m0.activations);
  CHECK(m1.buffers > m0.buffers);  // two layers in flight to and from the host
  // A copy costs bytes / (host link / 2): PCIe Gen4 on A100, 32 GB/s each way.
  const ComputeOp copy = first_op(kBase, off, "offload.d2h");
  CHECK(copy.kind == OpKind::HostCopy);
  const Scenario s = load_scenario_text(kBase, "options.json", "", off, catalog());
  const Cluster cluster(s.cluster);
  const ComputeCostModel costs(cluster, s.profiles);
  CHECK(costs.seconds(copy, 0) == doctest::Approx(copy.bytes / 32e9));
  // A layer's activations at 4096 tokens take longer over PCIe than its compute: the step slows.
  CHECK(with.iteration_time_s > base.iteration_time_s);
  // Over a link 100x faster the copies hide behind compute: within 2% of no offload.
  std::string fast = kBase;
  fast.replace(fast.find("\"node\": \"dgx-a100\""), std::string("\"node\": \"dgx-a100\"").size(),
               R"("node": {"preset": "dgx-a100", "gpu": {"name": "A100-fast-host", "vendor": "nvidia",
                "arch": "ampere", "peak_tflops": {"bf16": 312, "fp16": 312}, "memory": "80GiB",
                "memory_bandwidth": "2039GB/s", "scaleup_bandwidth": "600GB/s", "host_bandwidth": "6400GB/s",
                "profile": "A100-SXM4-80GB", "source": "test: an A100 with a fast host link"}})");
  const double fast_off = run(off, fast).iteration_time_s, fast_base = run({}, fast).iteration_time_s;
  CHECK(fast_off < 1.02 * fast_base);
  // Errors: a GPU without a host link figure, and offloading every layer of a chunk.
  CHECK(load_error(kBase, {"parallel.activation_offload_layers=20", "cluster.node=dgx-b200"})
            .find("has no host_bandwidth") != std::string::npos);
  CHECK(load_error(kBase, {"parallel.activation_offload_layers=24"}).find("at most all but one") != std::string::npos);
}

TEST_CASE("linear biases: Megatron-LM adds the QKV bias and sums every bias gradient in kernels of their own") {
  // Hidden 2048 on TP 2, micro-batch 2 x 4096 tokens, bf16: the rank's QKV output is
  // 8192 tokens x 3072 columns, its MLP activation 8192 x 4096.
  const std::string text = R"({
    "model": {"name": "bias-test", "layers": 4, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 50304},
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 4096, "precision": "bf16", "attention": "flash"}
  })";
  const std::vector<std::string> bias{"model.bias=true"};
  const double tokens = 2 * 4096, qkv = tokens * 3 * 2048 / 2 * 2, act = tokens * 2048 * 2;
  CHECK(first_op(text, bias, "attn.qkv.bias").bytes == doctest::Approx(2 * qkv));  // read + write
  const ComputeOp mlp = first_op(text, bias, "mlp.bias.grad"), attn = first_op(text, bias, "attn.bias.grad");
  CHECK(mlp.bytes == doctest::Approx(act + tokens * 8192 / 2 * 2));  // down: block output; up: activation
  CHECK(attn.bytes == doctest::Approx(act + qkv));                   // projection output; dQ, dK, dV
  CHECK(mlp.kernels == 2);
  CHECK(attn.kernels == 2);
  CHECK(run(bias, text).iteration_time_s > run({}, text).iteration_time_s);
  // Without the key, and where the framework fuses them (Inductor), nothing is added;
  // eager nn.Linear adds the bias in its GEMM but sums the gradient separately.
  CHECK(tasks_ending(stage_program(text, {}), ".bias").empty());
  {
    const ProgramTemplate p = stage_program(text, {"model.bias=true", "training.framework=torch-compile"});
    CHECK(tasks_ending(p, ".bias").empty());
    CHECK(tasks_ending(p, ".bias.grad").empty());
  }
  // Megatron-Core with Transformer Engine: no add and no QKV or output-projection sums, but
  // autograd reduces the fused bias-GeLU's full gradient to the MLP input bias: one read of
  // the activation's input gradient (8192 tokens x 4096 columns, 2 B).
  const std::vector<std::string> te{"model.bias=true", "training.framework=megatron-te"};
  const ProgramTemplate mcore = stage_program(text, te);
  CHECK(tasks_ending(mcore, ".bias").empty());
  CHECK(tasks_ending(mcore, "attn.bias.grad").empty());
  CHECK_FALSE(tasks_ending(mcore, "mlp.bias.grad").empty());
  const ComputeOp up = first_op(text, te, "mlp.bias.grad");
  CHECK(up.bytes == doctest::Approx(tokens * 8192 / 2 * 2));
  CHECK(up.kernels == 1);
  CHECK(tasks_ending(stage_program(text, {"training.framework=megatron-te"}), ".bias.grad").empty());
  const ProgramTemplate eager = stage_program(text, {"model.bias=true", "training.framework=eager"});
  CHECK(tasks_ending(eager, ".bias").empty());
  CHECK_FALSE(tasks_ending(eager, "mlp.bias.grad").empty());
  // Biases are modelled on the standard dense block only.
  CHECK(load_error(text, {"model.bias=true", "model.parallel_block=true"}).find("/model/bias:") != std::string::npos);
}

TEST_CASE("eager LayerNorm is PyTorch's native kernel: fused forward, a second kernel for the weight gradients") {
  // Only Hugging Face's LlamaRMSNorm runs op by op; nn.LayerNorm is one kernel forward and
  // an input-gradient plus a gamma/beta kernel (re-reading dY and X) backward.
  const std::string text = R"({
    "model": {"name": "ln-test", "layers": 4, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 50304,
              "norm": "layernorm"},
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 1, "dp": 8, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048, "precision": "bf16", "attention": "flash"}
  })";
  for (const char* fw : {"training.framework=eager", "training.framework=fsdp2"}) {
    const ComputeOp fwd = first_op(text, {fw}, "norm1"), bwd = first_op(text, {fw}, "norm1.bwd");
    CHECK(fwd.bytes == doctest::Approx(first_op(text, {}, "norm1").bytes));
    CHECK(fwd.kernels == 1);
    CHECK(bwd.bytes == doctest::Approx(1.5 * first_op(text, {}, "norm1.bwd").bytes));
    CHECK(bwd.kernels == 2);
  }
  // RMSNorm stays the op-by-op list.
  CHECK(first_op(text, {"training.framework=eager", "model.norm=rmsnorm"}, "norm1").kernels == 8);
}

TEST_CASE("Megatron-DeepSpeed's backward: apex LayerNorm gradient, the QKV split's cat, the residual forks' sums") {
  // OPT-350M as Sailor's artifact trains it (FP32, unfused attention), TP 2.
  const std::string text = R"({
    "model": {"name": "opt-test", "layers": 4, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 50688,
              "mlp": "relu", "norm": "layernorm", "position": "learned"},
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048, "precision": "tf32", "attention": "unfused", "dropout": false}
  })";
  const double elements = 2.0 * 2048 * 1024;         // the block's activations: tokens x hidden
  const double qkv = 2.0 * 2048 * 3 * 1024 / 2 * 4;  // this rank's fp32 QKV output
  auto has_op = [&](const std::vector<std::string>& sets, const std::string& name) {
    const Scenario s = load_scenario_text(text, "options.json", "", sets, catalog());
    const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, Cluster(s.cluster), PlanOptions{});
    const auto& ops = plan.setup.programs.at(0).ops;
    return std::any_of(ops.begin(), ops.end(), [&](const ComputeOp& op) { return op.name == name; });
  };
  const std::vector<std::string> ds = {"training.framework=deepspeed"};
  // apex's HostLayerNormGradient: part-gamma/beta (dY, X), their sum, the input gradient
  // (dY, X -> dX): 5 x 4 B per element in 3 kernels, where the fused lists charge 4 x 4 B.
  for (const char* norm : {"norm1.bwd", "norm2.bwd", "final.norm.bwd"}) {
    CHECK(first_op(text, ds, norm).bytes == doctest::Approx(20.0 * elements));
    CHECK(first_op(text, ds, norm).kernels == 3);
    CHECK(first_op(text, {}, norm).bytes == doctest::Approx(16.0 * elements));
  }
  // torch.split's derivative cats dQ, dK and dV: read + write the QKV output.
  CHECK(first_op(text, ds, "attn.qkv.split.bwd").bytes == doctest::Approx(2.0 * qkv));
  CHECK_FALSE(has_op({}, "attn.qkv.split.bwd"));
  CHECK_FALSE(has_op({"training.framework=eager"}, "attn.qkv.split.bwd"));  // separate q, k, v projections
  // The fork's two gradients summed by autograd (read 2, write 1) where the fused lists
  // charge a read + write; with residual dropout its mask multiply (4 + 1 + 4 B) too.
  for (const char* fw : {"training.framework=deepspeed", "training.framework=eager"}) {
    CHECK(first_op(text, {fw}, "mlp.residual.bwd").bytes == doctest::Approx(12.0 * elements));
    CHECK(first_op(text, {fw}, "attn.residual.bwd").bytes == doctest::Approx(12.0 * elements));
    const ComputeOp dropout = first_op(text, {fw, "training.dropout=true"}, "mlp.residual.bwd");
    CHECK(dropout.bytes == doctest::Approx(21.0 * elements));
    CHECK(dropout.kernels == 2);
  }
  CHECK(first_op(text, {}, "mlp.residual.bwd").bytes == doctest::Approx(8.0 * elements));
  // A mixture-of-experts layer's residual stream forks as the dense layer's does
  // (without TP: Megatron-Core's MoE with TP needs sequence parallelism).
  const std::string moe = R"(model.moe={"experts": 4, "top_k": 2, "expert_ffn": 1024})";
  CHECK(first_op(text, {moe, "parallel.tp=1", "parallel.dp=8", "training.framework=eager"}, "mlp.residual.bwd").bytes ==
        doctest::Approx(12.0 * elements));
  CHECK(first_op(text, {moe, "parallel.tp=1", "parallel.dp=8"}, "mlp.residual.bwd").bytes ==
        doctest::Approx(8.0 * elements));
}

TEST_CASE("Megatron-Core's residual forks: autograd sums the norm's and the residual's gradients") {
  // megatron/core/transformer/transformer_layer.py (core_r0.8.0): `residual = hidden_states`
  // beside the attention (whose TE LayerNormLinear reads the same tensor) and beside the MLP;
  // autograd adds the two gradients reaching each fork (InputBuffer::add: read 2 + write 1),
  // and with hidden dropout the compiled bias-dropout-add's backward reads the mask (2 + 1 + 2 B).
  const std::string text = R"({
    "model": {"name": "fork-test", "layers": 2, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 50304},
    "cluster": {"node": "dgx-h100", "nodes": 1},
    "parallel": {"tp": 1, "dp": 8, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048, "precision": "bf16", "framework": "megatron-te", "dropout": false}
  })";
  const double elements = 2.0 * 2048 * 1024;  // the block's activations: tokens x hidden
  for (const char* name : {"attn.residual.bwd", "mlp.residual.bwd"}) {
    const ComputeOp plain = first_op(text, {}, name);
    CHECK(plain.bytes == doctest::Approx(6.0 * elements));
    CHECK(plain.kernels == 1);
    const ComputeOp dropout = first_op(text, {"training.dropout=true"}, name);
    CHECK(dropout.bytes == doctest::Approx(11.0 * elements));
    CHECK(dropout.kernels == 2);
    // The default lists keep one read + write of the gradient.
    CHECK(first_op(text, {"training.framework=default"}, name).bytes == doctest::Approx(4.0 * elements));
  }
}

TEST_CASE("the embedding's gradient: PyTorch's dense table, added into Megatron's main_grad") {
  // GPT-3 1.3B (vocab 51200, hidden 2048, learned positions over 2048 tokens) on TP 2, 2 x 2048
  // tokens per micro-batch: embedding_dense_backward zero-fills each whole table in fp16
  // (25,600 x 2048 word rows on this TP rank and all 2048 position rows), sums the 4096
  // tokens' rows through fp32 partials (2 + 4 B in, 4 + 2 B out, the sorted path above 3,072
  // tokens), and Megatron's hook adds each table into the fp32 main_grad (2 + 4 + 4 B).
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2, "global_batch": 16, "schedule": "1f1b"},
    "training": {"seq_len": 2048, "precision": "fp16", "attention": "unfused"}
  })";
  const double tables = (51200.0 / 2 + 2048) * 2048;
  const ComputeOp zero = first_op(text, {}, "embed.grad.zero");
  CHECK(zero.bytes == doctest::Approx(tables * 2));
  CHECK(zero.kernels == 2);
  const ComputeOp scatter = first_op(text, {}, "embed.grad");
  CHECK(scatter.bytes == doctest::Approx(2 * 4096.0 * 2048 * 12));
  CHECK(scatter.kernels == 28);
  CHECK(first_op(text, {}, "embed.grad.main").bytes == doctest::Approx(tables * 10));
  // A bf16 reduction keeps main_grad in bf16; one micro-batch of 2048 tokens takes the
  // unsorted kernel; RoPE has no position table.
  CHECK(first_op(text, {"training.grad_reduce=\"bf16\""}, "embed.grad.main").bytes == doctest::Approx(tables * 6));
  CHECK(first_op(text, {"parallel.micro_batch=1"}, "embed.grad").kernels == 2);
  CHECK(first_op(text, {"model.position=\"rope\""}, "embed.grad.zero").bytes ==
        doctest::Approx(51200.0 / 2 * 2048 * 2));
  // The hook is Megatron's: DeepSpeed accumulates in its own pass, eager PyTorch in
  // AccumulateGrad (training.grad_accumulation), so neither adds the table here.
  for (const char* fw : {"deepspeed", "eager"}) {
    const ProgramTemplate p = stage_program(text, {std::string("training.framework=\"") + fw + "\""});
    CHECK(tasks_ending(p, "embed.grad.main").empty());
    CHECK_FALSE(tasks_ending(p, "embed.grad.zero").empty());
  }
  CHECK(tasks_ending(stage_program(text, {"training.grad_accumulation=\"autograd\""}), "embed.grad.main").empty());
  // Only the first stage embeds.
  CHECK(tasks_ending(stage_program(text, {}, 1), "embed.grad.zero").empty());
}

TEST_CASE("framework megatron-legacy: Megatron-LM's pre-Core model kernels, without DeepSpeed's engine") {
  // Megatron-LM's megatron/model/ of 2020-2022 (the April 2021 code of Narayanan et al.):
  // MixedFusedLayerNorm (the apex kernels), split_tensor_along_last_dim (torch.split),
  // autograd's residual sums and vocab_parallel_cross_entropy(output.float()), the model
  // code Megatron-DeepSpeed forked; its own training loop (no fp32 accumulation pass).
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2, "global_batch": 16, "dp_overlap": false,
                 "schedule": "1f1b"},
    "training": {"seq_len": 2048, "precision": "fp16", "attention": "unfused", "grad_reduce": "fp16",
                 "tied_grad_sync": "after-dp"}
  })";
  const std::vector<std::string> legacy = {"training.framework=\"megatron-legacy\""};
  const std::vector<std::string> ds = {"training.framework=deepspeed"};
  // Every kernel of the layers, the embedding and the head is DeepSpeed's (last stage: the
  // loss), but for Megatron's hook adding the embedding's gradient into main_grad, where
  // DeepSpeed accumulates every gradient in a pass of its own.
  for (int stage : {0, 1}) {
    std::vector<ComputeOp> a = stage_program(text, legacy, stage).ops;
    const std::vector<ComputeOp> b = stage_program(text, ds, stage).ops;
    const auto main_grad =
        std::find_if(a.begin(), a.end(), [](const ComputeOp& op) { return op.name == "embed.grad.main"; });
    CHECK((main_grad != a.end()) == (stage == 0));
    if (main_grad != a.end()) a.erase(main_grad);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].name == b[i].name);
      CHECK(a[i].bytes == doctest::Approx(b[i].bytes));
      CHECK(a[i].kernels == b[i].kernels);
    }
  }
  // ... and not the default lists': the loss (38 B per fp16 logit, not 10), apex's
  // LayerNorm gradient in 3 kernels, the QKV split's cat.
  const ProgramTemplate last = stage_program(text, legacy, 1);
  const auto xent = tasks_ending(last, "loss.xent");
  REQUIRE_FALSE(xent.empty());
  const double logits = 2.0 * 2048 * (51200 / 2);  // GPT-3 1.3B's vocabulary, padded: 51200
  CHECK(last.ops[last.tasks[xent[0]].ref].bytes == doctest::Approx(38.0 * logits).epsilon(0.01));
  CHECK(first_op(text, legacy, "norm1.bwd").kernels == 3);
  CHECK(first_op(text, {}, "norm1.bwd").kernels == 1);
  CHECK(first_op(text, legacy, "attn.qkv.split.bwd").bytes > 0);
  // Megatron-LM's training loop: no BF16_Optimizer pass, a reduce-scatter or all-reduce as
  // the default; autograd accumulation allowed (an input error with deepspeed).
  CHECK(tasks_ending(stage_program(text, legacy), "grad.accumulate.fp32").empty());
  CHECK(tasks_ending(stage_program(text, legacy), "dp.ar.grads").size() ==
        tasks_ending(stage_program(text, {}), "dp.ar.grads").size());
  CHECK_FALSE(
      tasks_ending(stage_program(text, {legacy[0], "training.grad_accumulation=autograd"}), "grad.accumulate").empty());
  CHECK(host_dispatch_seconds(Framework::MegatronLegacy) == host_dispatch_seconds(Framework::Eager));
  // It costs time against the default lists.
  CHECK(run({}, text).iteration_time_s < run(legacy, text).iteration_time_s);
  // From October 2021 apex.contrib's persistent LayerNorm for the listed hidden sizes (GPT-3
  // 1.3B: 2048) in 2 kernels: ln_bwd_kernel reads dz and x and writes dx (fp16: 3 x 2 B per
  // element of the 2 x 2048 tokens), and ctas_per_col = 108 SMs / 1 CTA per row fp32 partial
  // dgamma and dbeta rows go out and back in (16 B per row and column); an unlisted size
  // falls back to apex's 3 kernels.
  const std::vector<std::string> persist = {legacy[0], "training.persist_layer_norm=true"};
  const ComputeOp fast = first_op(text, persist, "norm1.bwd");
  CHECK(fast.bytes == doctest::Approx((3.0 * 2 * 4096 + 16.0 * 108) * 2048));
  CHECK(fast.kernels == 2);
  // A row split over 5 CTAs (hidden 12800): 108 / 5 = 21 partial rows.
  const std::vector<std::string> wide = {"model.hidden=12800", "model.heads=100", "model.kv_heads=100"};
  CHECK(first_op(text, {persist[0], persist[1], wide[0], wide[1], wide[2]}, "norm1.bwd").bytes ==
        doctest::Approx((3.0 * 2 * 4096 + 16.0 * 21) * 12800));
  const ComputeOp fallback =
      first_op(text, {persist[0], persist[1], "model.hidden=2560", "model.heads=20", "model.kv_heads=20"}, "norm1.bwd");
  CHECK(fallback.kernels == 3);
  CHECK(
      fallback.bytes ==
      doctest::Approx(
          first_op(text, {legacy[0], "model.hidden=2560", "model.heads=20", "model.kv_heads=20"}, "norm1.bwd").bytes));
  CHECK(first_op(text, persist, "attn.qkv.split.bwd").bytes == first_op(text, legacy, "attn.qkv.split.bwd").bytes);
  // A setting of that framework only.
  const std::string e = load_error(text, {"training.persist_layer_norm=true"});
  CHECK(e.find("options.json: /training/persist_layer_norm:") != std::string::npos);
  CHECK(e.find("megatron-legacy") != std::string::npos);
  // The 2020-2022 code has LayerNorm, a GeLU MLP and learned positions only, no FP8, no
  // cuDNN attention and no CUDA graphs: anything else is an input error naming the key.
  auto legacy_error = [&](const std::string& set) { return load_error(text, {legacy[0], set}); };
  CHECK(legacy_error("model.norm=\"rmsnorm\"").find("options.json: /model/norm: megatron-legacy models LayerNorm") !=
        std::string::npos);
  CHECK(legacy_error("model.mlp=\"swiglu\"").find("options.json: /model/mlp:") != std::string::npos);
  CHECK(legacy_error("model.position=\"rope\"").find("options.json: /model/position:") != std::string::npos);
  CHECK(legacy_error("training.precision=\"fp8\"").find("options.json: /training/precision:") != std::string::npos);
  CHECK(legacy_error("training.attention=\"cudnn\"").find("options.json: /training/attention:") != std::string::npos);
  CHECK(legacy_error("training.cuda_graphs=\"layers\"").find("options.json: /training/cuda_graphs:") !=
        std::string::npos);
  // Nor grouped-query attention, sliding windows or MoE layers.
  CHECK(legacy_error("model.kv_heads=8").find("options.json: /model/kv_heads: megatron-legacy") != std::string::npos);
  CHECK(legacy_error("model.sliding_window=1024").find("options.json: /model/sliding_window:") != std::string::npos);
  CHECK(
      load_error(text, {legacy[0], "model.bias=false",
                        R"(model.mla={"kv_lora_rank": 512, "qk_nope_dim": 128, "qk_rope_dim": 64, "v_head_dim": 128})"})
          .find("options.json: /model/mla: megatron-legacy") != std::string::npos);
  CHECK(load_error(text, {legacy[0], "model.bias=false", R"(model.moe={"experts": 8, "top_k": 2, "expert_ffn": 4096})"})
            .find("options.json: /model/moe: megatron-legacy") != std::string::npos);
  const std::string llama = load_error(R"({"model": "llama2-7b", "cluster": {"node": "dgx-a100", "nodes": 1},
    "parallel": {"tp": 8, "micro_batch": 1, "global_batch": 8},
    "training": {"seq_len": 4096, "precision": "bf16", "attention": "unfused", "framework": "megatron-legacy"}})",
                                       {});
  CHECK(llama.find("/model/norm:") != std::string::npos);
  CHECK(llama.find("/model/mlp:") != std::string::npos);
  CHECK(llama.find("/model/position:") != std::string::npos);
  // The persistent kernel is a LayerNorm's: an RMSNorm model with it is an error of its own.
  CHECK(load_error(text, {persist[0], persist[1], "model.norm=\"rmsnorm\""})
            .find("options.json: /training/persist_layer_norm: Megatron-LM's persistent LayerNorm needs a LayerNorm") !=
        std::string::npos);
  CHECK(legacy_error("training.attention=\"flash\"").find("options.json: /training/attention:") != std::string::npos);
  // Without an attention key the framework runs its own unfused core.
  std::string no_attention = text;
  no_attention.replace(no_attention.find(R"("attention": "unfused", )"), 24, "");
  CHECK(load_scenario_text(no_attention, "options.json", "", legacy, catalog()).training.attention ==
        AttentionKind::Unfused);
  CHECK(load_scenario_text(no_attention, "options.json", "", ds, catalog()).training.attention == AttentionKind::Flash);
}

TEST_CASE("selective recomputation: Megatron-Core reruns its fused attention core, legacy Megatron only unfused") {
  // Llama-3 8B on 8 H200 without ZeRO-3 or full recomputation; the attention core
  // forward appears once per layer and micro-batch, and once more where it is rerun.
  const std::vector<std::string> base{"parallel.zero=1", "parallel.recompute=none"};
  auto cores = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), base.begin(), base.end());
    return tasks_ending(stage_program(kLlama, sets), "attn.core").size();
  };
  const std::string te = "training.framework=megatron-te", selective = "parallel.recompute=selective";
  const std::size_t plain = cores({te});
  REQUIRE(plain > 0);
  CHECK(cores({te, selective}) == 2 * plain);                              // cuDNN core rerun
  CHECK(cores({te, selective, "training.attention=flash"}) == 2 * plain);  // any TE backend
  CHECK(cores({selective}) == cores({}));                                  // legacy: flash not checkpointed
  auto softmaxes = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), base.begin(), base.end());
    sets.push_back("training.attention=unfused");
    return tasks_ending(stage_program(kLlama, sets), "attn.softmax").size();
  };
  CHECK(softmaxes({selective}) == 2 * softmaxes({}));  // legacy: the unfused core is rerun
  auto step = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), base.begin(), base.end());
    return simulate(llama(sets)).iteration_time_s;
  };
  CHECK(step({te, selective}) > step({te}));
}

TEST_CASE("TP communication overlap: userbuffers split the ring-exchange and pipeline GEMMs into chunks") {
  // gpt3-1.3b on TP 2 with sequence parallelism: 2 x 4096 tokens per micro-batch.
  const std::vector<std::string> sp{"parallel.sequence_parallel=true"};
  const std::vector<std::string> ov{"parallel.sequence_parallel=true", "parallel.tp_comm_overlap=true"};
  const double tokens = 2 * 4096;
  for (const char* name : {"attn.qkv", "mlp.up", "attn.proj.dgrad", "mlp.down.dgrad"}) {  // ring exchange: tp chunks
    const ComputeOp whole = first_op(kBase, sp, name), split = first_op(kBase, ov, name);
    CHECK(whole.m == static_cast<std::int64_t>(tokens));
    CHECK(whole.kernels == 1);
    CHECK(split.m == static_cast<std::int64_t>(tokens / 2));
    CHECK(split.kernels == 2);
    CHECK(split.flops == doctest::Approx(whole.flops));
  }
  for (const char* name : {"attn.proj", "mlp.down"}) {  // pipeline: 4 chunks
    const ComputeOp split = first_op(kBase, ov, name);
    CHECK(split.m == static_cast<std::int64_t>(tokens / 4));
    CHECK(split.kernels == 4);
    CHECK(split.flops == doctest::Approx(first_op(kBase, sp, name).flops));
  }
  for (const char* name : {"attn.qkv.dgrad", "attn.qkv.wgrad", "mlp.up.dgrad", "mlp.up.wgrad"}) {  // bulk: whole
    CHECK(first_op(kBase, ov, name).kernels == 1);
    CHECK(first_op(kBase, ov, name).m == first_op(kBase, sp, name).m);
  }
  // A chunk runs lower on the GEMM curve than the whole GEMM.
  CHECK(kernel_seconds(ov, "mlp.up") > kernel_seconds(sp, "mlp.up"));
}

TEST_CASE("memory kernels: apex's LayerNorm and TE's cast-transpose run at their measured share of the curve") {
  // docs/calibration.md, "Memory-bound kernels": an op names the framework kernel it runs,
  // and the profile's `memory_kernels` figure for it scales the memory-bound curve.
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-a100", "nodes": 1, "gpu_speed_spread": 0},
    "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048, "precision": "fp16", "attention": "unfused", "grad_reduce": "fp16"}
  })";
  const std::vector<std::string> legacy = {"training.framework=\"megatron-legacy\""};
  // apex's fused_layer_norm_cuda in Megatron-LM's and Megatron-DeepSpeed's model code; not
  // the persistent kernel of October 2021 (no figure of its own) nor the other lists.
  for (const std::vector<std::string>& fw : {legacy, std::vector<std::string>{"training.framework=deepspeed"}}) {
    CHECK(first_op(text, fw, "norm1").memory_kernel == MemoryKernel::ApexLayerNormForward);
    CHECK(first_op(text, fw, "final.norm").memory_kernel == MemoryKernel::ApexLayerNormForward);
    CHECK(first_op(text, fw, "norm2.bwd").memory_kernel == MemoryKernel::ApexLayerNormBackward);
    CHECK(first_op(text, fw, "mlp.residual").memory_kernel == MemoryKernel::Generic);
  }
  CHECK(first_op(text, {legacy[0], "training.persist_layer_norm=true"}, "norm1.bwd").memory_kernel ==
        MemoryKernel::Generic);
  CHECK(first_op(text, {}, "norm1").memory_kernel == MemoryKernel::Generic);
  CHECK(first_op(text, {"training.framework=eager"}, "norm1.bwd").memory_kernel == MemoryKernel::Generic);

  // The A100 profiles charge apex's forward at 0.70 and its backward at 0.79 of the curve
  // (apex pull 1037); without the profile entry the same op runs at the curve.
  const Scenario s = load_scenario_text(text, "options.json", "", legacy, catalog());
  const Cluster cluster(s.cluster);
  const ComputeCostModel costs(cluster, s.profiles);
  const double launch = s.profiles.at(0).launch_overhead.value;
  auto gpu_seconds = [&](const ComputeCostModel& m, ComputeOp op, MemoryKernel k) {
    op.memory_kernel = k;
    op.host_dispatch_seconds = 0;
    return m.seconds(op, 0) - op.kernels * launch;
  };
  for (const auto& [name, speed] : {std::pair<const char*, double>{"norm1", 0.70}, {"norm1.bwd", 0.79}}) {
    const ComputeOp op = first_op(text, legacy, name);
    CHECK(gpu_seconds(costs, op, MemoryKernel::Generic) / gpu_seconds(costs, op, op.memory_kernel) ==
          doctest::Approx(speed));
  }
  const std::string bare = with_edited_a100_profile(text, "trainsim_test_memory_kernels.json", [](nlohmann::json& p) {
    REQUIRE(p.contains("memory_kernels"));
    p.erase("memory_kernels");
  });
  const Scenario b = load_scenario_text(bare, "options.json", "", legacy, catalog());
  const Cluster bare_cluster(b.cluster);
  const ComputeCostModel bare_costs(bare_cluster, b.profiles);
  const ComputeOp norm = first_op(text, legacy, "norm1.bwd");
  CHECK(gpu_seconds(bare_costs, norm, norm.memory_kernel) ==
        doctest::Approx(gpu_seconds(costs, norm, MemoryKernel::Generic)));
  CHECK(run(legacy, bare).iteration_time_s < run(legacy, text).iteration_time_s);

  // Transformer Engine's FP8 cast-transpose (delayed scaling) in front of each FP8 GEMM and
  // in the once-per-step weight cast: 0.48 of the H100 curve (TransformerEngine pull 101).
  const std::string file =
      std::string(TRAINSIM_SOURCE_DIR) + "/scenarios/validation/nemo2407_h100_fp8_GPT3-5B_64gpu.json";
  const Scenario n = load_scenario_file(file, {"cluster.gpu_speed_spread=0"}, catalog());
  const Cluster h100(n.cluster);
  const ComputeCostModel h100_costs(h100, n.profiles);
  const TrainingPlan plan = plan_training(n.model, n.parallel, n.training, h100, PlanOptions{});
  REQUIRE(n.profiles.at(0).launch_overhead.value == launch);
  int casts = 0, weight_casts = 0;
  for (const ComputeOp& op : plan.setup.programs.at(0).ops) {
    const bool cast =
        op.name.ends_with(".fp8cast") || op.name.ends_with(".fp8transpose") || op.name == "fp8.weight.cast";
    CHECK((op.memory_kernel == MemoryKernel::TeCastTranspose) == cast);
    if (!cast) continue;
    ++casts;
    weight_casts += op.name == "fp8.weight.cast";
    CHECK(gpu_seconds(h100_costs, op, MemoryKernel::Generic) / gpu_seconds(h100_costs, op, op.memory_kernel) ==
          doctest::Approx(0.48));
  }
  CHECK(casts > 0);
  CHECK(weight_casts > 0);
  // Current scaling runs the same cast-transpose after its amax pass; MXFP8 and block scaling
  // run other quantisers: the curve.
  TrainingSpec current = n.training;
  current.fp8_recipe = Fp8Recipe::Current;
  CHECK(fp8_cast_kernel(n.training) == MemoryKernel::TeCastTranspose);
  CHECK(fp8_cast_kernel(current) == MemoryKernel::TeCastTranspose);
  for (Fp8Recipe r : {Fp8Recipe::Mxfp8, Fp8Recipe::Blockwise}) {
    current.fp8_recipe = r;
    CHECK(fp8_cast_kernel(current) == MemoryKernel::Generic);
  }
  TrainingSpec other = n.training;
  other.framework = Framework::Default;
  CHECK(fp8_cast_kernel(other) == MemoryKernel::Generic);
}

TEST_CASE(
    "Transformer Engine's LayerNormLinear in FP8: the norm writes FP8, SP gathers FP8, wgrad reads its transpose") {
  // docs/frameworks.md, "FP8 recipes": transformer_engine/pytorch/module/layernorm_linear.py (v1.8).
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-h100", "nodes": 1},
    "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64, "sequence_parallel": true},
    "training": {"seq_len": 2048, "precision": "fp8", "framework": "megatron-te"}
  })";
  const double tokens = 2.0 * 2048, hidden = 2048;
  const double local = tokens / 2 * hidden;  // this rank's share of the block's activations under SP
  auto comm_bytes = [&](const std::vector<std::string>& sets, const std::string& name) {
    const Scenario s = load_scenario_text(text, "options.json", "", sets, catalog());
    const ModelSteps steps = build_model_steps(s.model, s.parallel, s.training);
    const LayerSteps& l = steps.of(LayerKind::Dense);
    for (const auto* list : {&l.forward, &l.backward}) {
      for (const Step& st : *list) {
        if (st.is_comm && st.name == name) return st.bytes;
      }
    }
    FAIL("no transfer " << name);
    return 0.0;
  };
  const std::vector<std::string> bf16 = {"training.precision=bf16"};
  // The norms in front of the QKV and MLP input projections read 16 bits and write FP8.
  CHECK(first_op(text, {}, "norm1").bytes == doctest::Approx(3.0 * local));
  CHECK(first_op(text, {}, "norm2").bytes == doctest::Approx(3.0 * local));
  CHECK(first_op(text, bf16, "norm1").bytes == doctest::Approx(4.0 * local));
  // Their sequence-parallel all-gathers, forward and the backward's re-gathers, move FP8.
  for (const char* ag : {"tp.ag.attn", "tp.ag.mlp", "tp.ag.attn.input", "tp.ag.mlp.input"}) {
    CHECK(comm_bytes({}, ag) == doctest::Approx(0.5 * comm_bytes(bf16, ag)));
  }
  // The output projections' gradient gathers move FP8 as well (the next test).
  CHECK(comm_bytes({}, "tp.ag.mlp.grad") == doctest::Approx(0.5 * comm_bytes(bf16, "tp.ag.mlp.grad")));
  // No cast in front of those GEMMs; the weight gradient reads an FP8 transpose (1 + 1 B per
  // element of the gathered input); the other FP8 GEMM inputs keep their cast-transpose.
  auto has = [&](const std::vector<std::string>& sets, const std::string& name) {
    const Scenario s = load_scenario_text(text, "options.json", "", sets, catalog());
    const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, Cluster(s.cluster), PlanOptions{});
    const auto& ops = plan.setup.programs.at(0).ops;
    return std::any_of(ops.begin(), ops.end(), [&](const ComputeOp& op) { return op.name == name; });
  };
  for (const char* gemm : {"attn.qkv", "mlp.up"}) {
    CHECK_FALSE(has({}, std::string(gemm) + ".fp8cast"));
    const ComputeOp t = first_op(text, {}, std::string(gemm) + ".fp8transpose");
    CHECK(t.bytes == doctest::Approx(2.0 * tokens * hidden));
    CHECK(t.memory_kernel == MemoryKernel::TeCastTranspose);
    CHECK_FALSE(has(bf16, std::string(gemm) + ".fp8transpose"));
    // Current scaling quantises the 16-bit norm output after its amax pass, as before.
    CHECK(has({"training.fp8_recipe=current"}, std::string(gemm) + ".fp8cast"));
    CHECK_FALSE(has({"training.fp8_recipe=current"}, std::string(gemm) + ".fp8transpose"));
  }
  CHECK(first_op(text, {}, "mlp.down.fp8cast").bytes == doctest::Approx(4.0 * tokens * 8192 / 2));
  CHECK(te_norm_fp8_output(load_scenario_text(text, "options.json", "", {}, catalog()).training));
  // A mixture-of-experts layer's pre-MLP norm is a norm of its own, writing 16 bits.
  const std::string moe = R"(model.moe={"experts": 4, "top_k": 2, "expert_ffn": 1024})";
  const Scenario ms = load_scenario_text(text, "options.json", "", {moe, "model.bias=false"}, catalog());
  const ModelSteps msteps = build_model_steps(ms.model, ms.parallel, ms.training);
  const LayerSteps& ml = msteps.of(LayerKind::Moe);
  int norms = 0;
  for (const Step& st : ml.forward) {
    if (st.is_comm) continue;
    if (st.name == "norm1") {
      CHECK(st.op.bytes == doctest::Approx(3.0 * local));
      ++norms;
    }
    if (st.name == "norm2") {
      CHECK(st.op.bytes == doctest::Approx(4.0 * local));
      ++norms;
    }
  }
  CHECK(norms == 2);
}

TEST_CASE("llm-foundry's fused xentropy loss and Composer's two metric cross-entropies after each backward") {
  // flash-attention's CrossEntropyLoss over xentropy_cuda_lib (two reads of the 16-bit
  // logits; backward a read and a write) and Composer's LanguageCrossEntropy and
  // LanguagePerplexity updates under autocast (docs/frameworks.md, "The loss and the
  // training metrics").
  const std::string text = R"({
    "model": {"name": "xent-test", "layers": 2, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 50368},
    "cluster": {"node": "dgx-h100", "nodes": 1},
    "parallel": {"dp": 8, "zero": 3, "micro_batch": 2, "global_batch": 32},
    "training": {"seq_len": 2048, "precision": "bf16", "attention": "flash", "framework": "eager"}
  })";
  const double logits = 2.0 * 2048 * 50368;
  auto op_of = [](const ProgramTemplate& p, std::uint32_t task) -> const ComputeOp& {
    return p.ops[p.tasks[task].ref];
  };
  auto first = [&](const ProgramTemplate& p, const std::string& name) -> const ComputeOp& {
    const auto t = tasks_ending(p, name);
    REQUIRE_FALSE(t.empty());
    return op_of(p, t[0]);
  };
  const ProgramTemplate base = stage_program(text, {});
  CHECK(first(base, "loss.xent").bytes == doctest::Approx(18.0 * logits));
  CHECK(first(base, "loss.xent.bwd").bytes == doctest::Approx(22.0 * logits));
  CHECK(tasks_ending(base, "metric.xent").empty());
  const ProgramTemplate fused = stage_program(text, {"training.loss_kernel=\"xentropy\""});
  CHECK(first(fused, "loss.xent").bytes == doctest::Approx(4.0 * logits));
  CHECK(first(fused, "loss.xent").kernels == 6);
  CHECK(first(fused, "loss.xent.bwd").bytes == doctest::Approx(4.0 * logits));
  CHECK(first(fused, "loss.xent.bwd").kernels == 4);
  CHECK(first(fused, "mlp.up").flops == first(base, "mlp.up").flops);
  // FP32 logits: the same passes at 4 B an element.
  const ProgramTemplate fused32 =
      stage_program(text, {"training.loss_kernel=\"xentropy\"", "training.precision=\"tf32\""});
  CHECK(first(fused32, "loss.xent").bytes == doctest::Approx(8.0 * logits));
  CHECK(first(fused32, "loss.xent.bwd").bytes == doctest::Approx(8.0 * logits));

  // Two metrics per micro-batch, two micro-batches (32 / (8 x 2)), each the eager
  // loss's forward over the logits; fp32 logits skip autocast's cast.
  const ProgramTemplate metrics = stage_program(text, {"training.metric_cross_entropies=2"});
  const auto m = tasks_ending(metrics, "metric.xent");
  REQUIRE(m.size() == 4);
  CHECK(op_of(metrics, m[0]).bytes == doctest::Approx(18.0 * logits));
  CHECK(op_of(metrics, m[0]).kernels == 7);
  const ProgramTemplate metrics32 =
      stage_program(text, {"training.metric_cross_entropies=1", "training.precision=\"tf32\""});
  REQUIRE(tasks_ending(metrics32, "metric.xent").size() == 2);
  CHECK(op_of(metrics32, tasks_ending(metrics32, "metric.xent")[0]).bytes == doctest::Approx(12.0 * logits));
  // They follow the micro-batch's whole backward (the embedding's gradient and FSDP's
  // passes over the root unit) and come before the next micro-batch's forward.
  const auto outer = tasks_ending(metrics, "fsdp.grad.passes outer");
  const auto head = tasks_ending(metrics, "final.norm");
  REQUIRE(outer.size() == 2);
  REQUIRE(head.size() == 2);
  const auto deps = metrics.deps_of(m[0]);
  CHECK(std::find(deps.begin(), deps.end(), outer[0]) != deps.end());
  CHECK(m[1] > m[0]);
  CHECK(head[1] > m[1]);
  // Each costs time: the step is slower with the metrics and faster with the fused loss.
  const double t = run({}, text).iteration_time_s;
  CHECK(run({"training.metric_cross_entropies=2"}, text).iteration_time_s > t);
  CHECK(run({"training.loss_kernel=\"xentropy\""}, text).iteration_time_s < t);
  // Steps of the model's own PyTorch code: an input error with the fused lists.
  const std::pair<const char*, const char*> keys[] = {{"training.loss_kernel=\"xentropy\"", "loss_kernel:"},
                                                      {"training.metric_cross_entropies=2", "metric_cross_entropies:"}};
  for (const auto& [set, key] : keys) {
    const std::string e = load_error(text, {"training.framework=\"megatron-te\"", set});
    CHECK(e.find(std::string("options.json: /training/") + key) != std::string::npos);
  }
  CHECK(load_error(text, {"training.loss_kernel=\"apex\""}).find("/training/loss_kernel:") != std::string::npos);
  CHECK(load_error(text, {"training.metric_cross_entropies=17"}).find("/training/metric_cross_entropies:") !=
        std::string::npos);
}

TEST_CASE("eager PyTorch's gradient clipping multiplies every local gradient after the norm") {
  // FullyShardedDataParallel.clip_grad_norm_ / torch.nn.utils.clip_grad_norm_ scale the
  // gradients by the clamped coefficient unconditionally (docs/frameworks.md, "Gradient clipping").
  const std::string text = R"({
    "model": {"name": "clip-test", "layers": 4, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 50368},
    "cluster": {"node": "dgx-h100", "nodes": 1},
    "parallel": {"dp": 8, "zero": 3, "micro_batch": 2, "global_batch": 32},
    "training": {"seq_len": 2048, "precision": "bf16", "attention": "flash", "framework": "eager"}
  })";
  auto op = [&](const std::vector<std::string>& sets, const std::string& name) -> std::optional<ComputeOp> {
    const ProgramTemplate p = stage_program(text, sets);
    const auto t = tasks_ending(p, name);
    if (t.empty()) return std::nullopt;
    return p.ops[p.tasks[t[0]].ref];
  };
  const std::optional<ComputeOp> clip = op({}, "optimizer.grad_clip");
  const std::optional<ComputeOp> norm = op({}, "optimizer.grad_norm");
  REQUIRE(clip.has_value());
  REQUIRE(norm.has_value());
  CHECK(clip->bytes == doctest::Approx(2 * norm->bytes));  // read + write 4 B against the norm's read
  CHECK(clip->kernels == 4 + 1);                           // one per FSDP unit: the layers and the root
  const std::optional<ComputeOp> ddp = op({"parallel.zero=1"}, "optimizer.grad_clip");
  REQUIRE(ddp.has_value());
  CHECK(ddp->kernels == 1);
  // Megatron's clipping scales only when the norm exceeds the threshold (a host check);
  // fsdp2 and torch-compile are left with the norm alone (docs/frameworks.md).
  CHECK_FALSE(op({"training.framework=\"megatron-te\""}, "optimizer.grad_clip").has_value());
  CHECK_FALSE(op({"training.framework=\"fsdp2\""}, "optimizer.grad_clip").has_value());
}

TEST_CASE("Megatron-Core's fused RoPE before Transformer Engine's attention: V, output and split copies") {
  // megatron/core/transformer/custom_layers/transformer_engine.py (core_r0.8.0) TEDotProductAttention.forward
  // with apply_rope_fusion; Transformer Engine v1.8 prepare_forward, FusedAttnFunc.backward, _SplitAlongDim.
  const std::string text = R"({
    "model": {"name": "rope-test", "layers": 2, "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn_hidden": 8192,
              "vocab": 32000, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": false},
    "cluster": {"node": "dgx-h100", "nodes": 1},
    "parallel": {"tp": 1, "dp": 8, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048, "precision": "bf16", "framework": "megatron-te"}
  })";
  const double tokens = 2.0 * 2048, d = 128;
  const double v = tokens * 4 * d * 2, out = tokens * 16 * d * 2, qkv = tokens * (16 + 2 * 4) * d * 2;
  auto has = [&](const std::vector<std::string>& sets, const std::string& name) {
    const Scenario s = load_scenario_text(text, "options.json", "", sets, catalog());
    const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, Cluster(s.cluster), PlanOptions{});
    const auto& ops = plan.setup.programs.at(0).ops;
    return std::any_of(ops.begin(), ops.end(), [&](const ComputeOp& op) { return op.name == name; });
  };
  // V is copied into the batch-major layout (read + write); the rotated Q and K already are.
  CHECK(first_op(text, {}, "attn.v.copy").bytes == doctest::Approx(2.0 * v));
  // Two sequences per micro-batch: the output transposed back is copied before the projection,
  // and its gradient before the attention's backward.
  CHECK(first_op(text, {}, "attn.out.copy").bytes == doctest::Approx(2.0 * out));
  CHECK(first_op(text, {}, "attn.out.grad.copy").bytes == doctest::Approx(2.0 * out));
  // dQ and dK come from the RoPE backward: _SplitAlongDim cats them with dV (read + write).
  CHECK(first_op(text, {}, "attn.qkv.split.bwd").bytes == doctest::Approx(2.0 * qkv));
  // One sequence per micro-batch: the transposes are views, V's copy and the cat remain.
  CHECK_FALSE(has({"parallel.micro_batch=1"}, "attn.out.copy"));
  CHECK_FALSE(has({"parallel.micro_batch=1"}, "attn.out.grad.copy"));
  CHECK(has({"parallel.micro_batch=1"}, "attn.v.copy"));
  CHECK(has({"parallel.micro_batch=1"}, "attn.qkv.split.bwd"));
  // Learned positions: Q, K and V stay adjacent views of the QKV output (the sbh3d layout).
  for (const char* name : {"attn.v.copy", "attn.out.copy", "attn.out.grad.copy", "attn.qkv.split.bwd"}) {
    CHECK_FALSE(has({"model.position=learned"}, name));
    CHECK_FALSE(has({"training.framework=default"}, name));
  }
}

TEST_CASE("Transformer Engine's row-parallel Linear in FP8 with SP: cast the gradient shard, gather FP8, transpose") {
  // transformer_engine/pytorch/module/base.py grad_output_preprocess and module/linear.py (v1.8).
  const std::string text = R"({
    "model": {"preset": "gpt3-1.3b", "bias": false},
    "cluster": {"node": "dgx-h100", "nodes": 1},
    "parallel": {"tp": 2, "dp": 4, "micro_batch": 2, "global_batch": 64, "sequence_parallel": true},
    "training": {"seq_len": 2048, "precision": "fp8", "framework": "megatron-te"}
  })";
  const double tokens = 2.0 * 2048, hidden = 2048;
  auto steps_of = [&](const std::vector<std::string>& sets) {
    const Scenario s = load_scenario_text(text, "options.json", "", sets, catalog());
    return build_model_steps(s.model, s.parallel, s.training).of(LayerKind::Dense).backward;
  };
  auto find = [](const std::vector<Step>& list, const std::string& name) -> const Step* {
    for (const Step& st : list) {
      if (st.name == name) return &st;
    }
    return nullptr;
  };
  const std::vector<Step> fp8 = steps_of({}), bf16 = steps_of({"training.precision=bf16"});
  const std::vector<Step> ov = steps_of({"parallel.tp_comm_overlap=true"});
  const std::vector<Step> no_sp = steps_of({"parallel.sequence_parallel=false"});
  for (const std::string proj : {"attn.proj", "mlp.down"}) {
    const std::string gather = proj == "attn.proj" ? "tp.ag.attn.grad" : "tp.ag.mlp.grad";
    // The rank's shard is cast (read 2 B, write 1 B) before the gather, which moves 1 B per element.
    const Step* cast = find(fp8, proj + ".grad.fp8cast");
    REQUIRE(cast != nullptr);
    CHECK(cast->op.bytes == doctest::Approx(3.0 * tokens / 2 * hidden));
    CHECK(find(fp8, gather)->bytes == doctest::Approx(tokens * hidden));
    CHECK(find(bf16, gather)->bytes == doctest::Approx(2.0 * tokens * hidden));
    // No cast in front of the data-gradient GEMM; the weight gradient reads the FP8 transpose
    // of the gathered gradient (1 + 1 B per element), at the cast-transpose's rate.
    CHECK(find(fp8, proj + ".dgrad.fp8cast") == nullptr);
    CHECK(find(no_sp, proj + ".dgrad.fp8cast") != nullptr);
    const Step* t = find(fp8, proj + ".grad.fp8transpose");
    REQUIRE(t != nullptr);
    CHECK(t->op.bytes == doctest::Approx(2.0 * tokens * hidden));
    CHECK(t->op.memory_kernel == MemoryKernel::TeCastTranspose);
    // Userbuffers' ring exchange moves the FP8 chunks too.
    CHECK(find(ov, proj + ".grad.fp8cast") != nullptr);
    CHECK(find(ov, proj + ".grad.fp8transpose") != nullptr);
    // Without SP, in BF16, or under current scaling: nothing of this.
    for (const std::vector<Step>* other : {&bf16, &no_sp}) {
      CHECK(find(*other, proj + ".grad.fp8cast") == nullptr);
      CHECK(find(*other, proj + ".grad.fp8transpose") == nullptr);
    }
    CHECK(find(steps_of({"training.fp8_recipe=current"}), proj + ".grad.fp8cast") == nullptr);
  }
}

TEST_CASE("bf16 Adam state: no master copy, a 14 B update, 4 B of state per parameter") {
  // docs/frameworks.md, "Optimizers": NeMo's distributed_fused_adam with optim.dtype bf16
  // (store_params false) runs apex's fused Adam over 16-bit parameters, m and v.
  const std::string text = R"({
    "model": "gpt3-1.3b",
    "cluster": {"node": "dgx-h100", "nodes": 1},
    "parallel": {"tp": 2, "dp": 4, "zero": 1, "micro_batch": 2, "global_batch": 64},
    "training": {"seq_len": 2048, "precision": "fp8", "framework": "megatron-te", "grad_reduce": "bf16"}
  })";
  const std::vector<std::string> bf16{"training.optimizer_dtype=\"bf16\""};
  auto op_bytes = [&](const std::vector<std::string>& sets, const char* name) {
    const ProgramTemplate p = stage_program(text, sets);
    const auto t = tasks_ending(p, name);
    REQUIRE(t.size() == 1);
    return p.ops[p.tasks[t[0]].ref].bytes;
  };
  // fp32 state: the 28 B update, the bf16 gradient's copy into fp32 (6 B) and the master's
  // copy to the 16-bit weights (6 B); the gradient norm reads fp32 gradients.
  const double params = op_bytes({}, "optimizer.grad_norm") / 4;
  CHECK(params > 1e7);
  CHECK(op_bytes({}, "optimizer.step") == doctest::Approx(40 * params).epsilon(1e-9));
  CHECK(op_bytes(bf16, "optimizer.step") == doctest::Approx(14 * params).epsilon(1e-9));
  CHECK(op_bytes(bf16, "optimizer.grad_norm") == doctest::Approx(2 * params).epsilon(1e-9));
  // A gradient reduced in fp32 is read at 4 B.
  std::vector<std::string> fp32_reduce = bf16;
  fp32_reduce.push_back("training.grad_reduce=\"fp32\"");
  CHECK(op_bytes(fp32_reduce, "optimizer.step") == doctest::Approx(16 * params).epsilon(1e-9));
  // State: m and v in bf16, no master copy.
  const Scenario s = load_scenario_text(text, "options.json", "", bf16, catalog());
  CHECK(s.training.bf16_optimizer_state);
  CHECK(optimizer_bytes_per_param(s.training) == 4.0);
  const JobReport fp32_state = run({}, text), bf16_state = run(bf16, text);
  CHECK(bf16_state.per_stage.at(0).memory.optimizer ==
        doctest::Approx(fp32_state.per_stage.at(0).memory.optimizer / 3.0));
  CHECK(bf16_state.iteration_time_s < fp32_state.iteration_time_s);
  // Adam over 16-bit weights only.
  CHECK(load_error(text, {"training.optimizer_dtype=\"bf16\"", "training.optimizer=\"sgd\""})
            .find("options.json: /training/optimizer_dtype:") != std::string::npos);
  CHECK(load_error(text, {"training.optimizer_dtype=\"bf16\"", "training.precision=\"fp32\"",
                          "training.framework=\"default\""})
            .find("/training/optimizer_dtype:") != std::string::npos);
  CHECK(load_error(text, {"training.optimizer_dtype=\"fp16\""}).find("/training/optimizer_dtype:") !=
        std::string::npos);
  // NeMo's distributed Adam only: not DeepSpeed's BF16_Optimizer or PyTorch's Adam under FSDP
  // (fp32 masters), nor an unsharded optimizer.
  CHECK(load_error(text, {"training.optimizer_dtype=\"bf16\"", "training.precision=\"bf16\"",
                          "training.framework=\"deepspeed\""})
            .find("/training/optimizer_dtype:") != std::string::npos);
  CHECK(load_error(text, {"training.optimizer_dtype=\"bf16\"", "training.precision=\"bf16\"",
                          "training.framework=\"eager\"", "parallel.zero=3"})
            .find("/training/optimizer_dtype:") != std::string::npos);
  CHECK(load_error(text, {"training.optimizer_dtype=\"bf16\"", "parallel.zero=0"}).find("/training/optimizer_dtype:") !=
        std::string::npos);
}

// Bytes of the first compute op called `name` in the first program (the first stage's), or
// in the last (the last stage's).
double op_bytes(const Scenario& s, const std::string& name, bool last = false) {
  const Cluster cluster(s.cluster);
  const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, cluster, PlanOptions{});
  for (const ComputeOp& op : (last ? plan.setup.programs.back() : plan.setup.programs.front()).ops) {
    if (op.name == name) return op.bytes;
  }
  FAIL("no op " << name);
  return 0;
}

TEST_CASE("a tied LM head on the embedding's own stage is one parameter, stepped once") {
  // pp = 1: the output weight is the word embedding itself (one tensor, one gradient,
  // one optimizer update); untied, it is a second vocab x hidden matrix.
  const Scenario tied = load_scenario_text(kBase, "options.json", "", {}, catalog());
  const Scenario untied = load_scenario_text(kBase, "options.json", "", {"model.tied_embeddings=false"}, catalog());
  REQUIRE(tied.model.tied_embeddings);
  const TransformerSpec& m = tied.model;
  // Per TP rank (tp 2): the layers (but their norms and row-parallel biases) and the head split,
  // the learned position table whole.
  const double layers = m.layers * m.params_per_layer_per_tp_rank(2), embedding = m.embedding_params_per_tp_rank(2);
  const double head = static_cast<double>(m.vocab) * m.hidden / 2;
  const double step_tied = op_bytes(tied, "optimizer.step"), step_untied = op_bytes(untied, "optimizer.step");
  CHECK(step_untied / step_tied == doctest::Approx((layers + embedding + head) / (layers + embedding)).epsilon(1e-9));
  // With a pipeline the last stage holds its own copy of the tied weight (Megatron-LM's
  // output layer on the last stage), so tied and untied step the same bytes there.
  const std::vector<std::string> pp{"parallel.pp=2", "parallel.dp=2"};
  const Scenario tied_pp = load_scenario_text(kBase, "options.json", "", pp, catalog());
  std::vector<std::string> untied_sets = pp;
  untied_sets.push_back("model.tied_embeddings=false");
  const Scenario untied_pp = load_scenario_text(kBase, "options.json", "", untied_sets, catalog());
  CHECK(op_bytes(tied_pp, "optimizer.step", true) == op_bytes(untied_pp, "optimizer.step", true));
  CHECK(op_bytes(tied_pp, "optimizer.step", true) > 0);
}

TEST_CASE("FlashAttention-3 and Triton FlashAttention refuse dropout (input error)") {
  for (const std::string attention : {"flash-attention-3", "flash-triton"}) {
    CAPTURE(attention);
    std::string error;
    try {
      load_scenario_text(R"({"model": "gpt3-1.3b", "cluster": {"node": "dgx-h100", "nodes": 1},
        "parallel": {"tp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64},
        "training": {"seq_len": 2048, "precision": "bf16"}})",
                         "fa.json", "", {"training.attention=" + attention}, catalog());
    } catch (const InputError& e) {
      error = e.what();
    }
    CHECK(error.find("fa.json: /training/attention:") != std::string::npos);
    CHECK(error.find("has no attention dropout") != std::string::npos);
  }
}
