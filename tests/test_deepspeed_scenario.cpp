// DeepSpeed's TrainSchedule in scenarios (docs/schedules.md, docs/frameworks.md):
// the default with "framework": "deepspeed" and PP > 1, an explicit schedule
// kept, the blocking send/recv it implies, and a run at both fidelities.
#include <doctest/doctest.h>

#include <string>

#include "models/planner.hpp"
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

TEST_CASE("DeepSpeed's pipeline engine rebuilds each partitioned message with PartitionedTensor.full()") {
  // The 2022 engine (before v0.8.3: the legacy TrainSchedule), whose code this follows.
  const std::string legacy = R"(parallel.schedule="deepspeed-1f1b-legacy")";
  const Scenario s = load(kDeepSpeed, {legacy});
  const TrainingPlan plan = plan_training(s.model, s.parallel, s.training, Cluster(s.cluster), PlanOptions{});
  // One micro-batch's activation, whole (2 x 2048 tokens x 2048 hidden x 2 B) and one TP rank's part.
  const double full = 2.0 * 2048 * 2048 * 2, part = full / 8;
  auto find = [&](int stage, const std::string& name) -> const ComputeOp* {
    for (const ComputeOp& op : plan.setup.programs.at(stage).ops) {
      if (op.name == name) return &op;
    }
    return nullptr;
  };
  // The receiving stage: the received part cloned twice, then full(): zero fill of the whole
  // buffer, the part copied in, the all-gather's flat buffer copied back part by part (8), the
  // clone of the result; it partitions its input gradient before sending it (a clone).
  const ComputeOp* recv = find(1, "F pp.full activations");
  REQUIRE(recv != nullptr);
  CHECK(recv->bytes == doctest::Approx(5 * full + 2 * part + 4 * part));
  CHECK(recv->kernels == 3 + 8 + 2);
  REQUIRE(find(1, "B pp.partition gradients") != nullptr);
  CHECK(find(1, "B pp.partition gradients")->bytes == doctest::Approx(2 * part));
  CHECK(find(1, "B pp.full outputs") == nullptr);  // the last stage keeps its output whole
  // The sending stage: its output's part cloned before the send, and before each backward
  // the output rebuilt (part_output.full()) and the received gradient (part_grad.full()).
  REQUIRE(find(0, "F pp.partition activations") != nullptr);
  REQUIRE(find(0, "B pp.full outputs") != nullptr);
  REQUIRE(find(0, "B pp.full gradients") != nullptr);
  CHECK(find(0, "B pp.full gradients")->bytes == doctest::Approx(5 * full + 2 * part));
  CHECK(find(0, "F pp.full activations") == nullptr);
  // Whole messages (no partitioning) need none of it, nor does the later engine.
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{legacy, "parallel.pp_scatter_gather=false"}, std::vector<std::string>{}}) {
    const Scenario other = load(kDeepSpeed, sets);
    const TrainingPlan oplan =
        plan_training(other.model, other.parallel, other.training, Cluster(other.cluster), PlanOptions{});
    for (const ComputeOp& op : oplan.setup.programs.at(1).ops) CHECK(op.name.find("pp.full") == std::string::npos);
  }
}

TEST_CASE("a partitioned DeepSpeed message sends its metadata first, each p2p call a blocking NCCL launch") {
  const std::string legacy = R"(parallel.schedule="deepspeed-1f1b-legacy")";
  auto plan_of = [&](const std::vector<std::string>& sets) {
    const Scenario s = load(kDeepSpeed, sets);
    return plan_training(s.model, s.parallel, s.training, Cluster(s.cluster), PlanOptions{});
  };
  const TrainingPlan plan =
      plan_of({legacy, "training.launch_blocking=true", "parallel.tp_grad_overlap=false", "parallel.dp_overlap=false"});
  // PartitionedTensor.to_meta(): rank, 3 dimensions, part count, rank index, tp + 1 bounds.
  const std::uint64_t meta = (1 + 3 + 2 + 8 + 1) * 8;
  for (int stage = 0; stage < 2; ++stage) {
    CAPTURE(stage);
    const ProgramTemplate& p = plan.setup.programs.at(stage);
    int metas = 0, parts = 0, host = 0;
    for (std::size_t t = 0; t < p.tasks.size(); ++t) {
      const Task& task = p.tasks[t];
      const std::string l(p.labels[task.label]);
      if (task.kind == TaskKind::Send || task.kind == TaskKind::Recv) {
        if (l.ends_with(" meta")) {
          ++metas;
          CHECK(task.bytes == meta);
          // The part follows on the same stream, after the metadata.
          REQUIRE(t + 1 < p.tasks.size());
          CHECK(std::string(p.labels[p.tasks[t + 1].label]) + " meta" == l);
        } else {
          ++parts;
        }
      }
      if (task.kind == TaskKind::Compute && (l == "pp.send.host" || l == "pp.recv.host")) {
        ++host;
        const ComputeOp& op = p.ops[task.ref];
        CHECK(op.comm_launches == 2);  // the metadata's call and the part's
        CHECK(op.launch_blocking);
        CHECK(op.kernels >= 1);  // the metadata copied to the GPU, or cloned and read back
      }
    }
    // 8 micro-batches: each stage sends 8 messages (activations or gradients) and receives 8.
    CHECK(metas == 16);
    CHECK(parts == 16);
    CHECK(host == 16);
  }
  // Whole messages carry no metadata, and without blocking launches nothing is charged for them.
  const TrainingPlan whole = plan_of({legacy, "parallel.pp_scatter_gather=false"});
  for (const ProgramTemplate& p : whole.setup.programs) {
    for (const Task& task : p.tasks) {
      CHECK_FALSE(p.labels[task.label].ends_with(" meta"));
      CHECK(p.labels[task.label].find(".host") == std::string::npos);
    }
  }
}
