// DeepSpeed's TrainSchedule (models/deepspeed_schedule.hpp): the command order
// of each stage against the source's own, and the makespan of its blocking
// transfers against 1F1B's on a uniform toy pipeline.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "model_fixtures.hpp"
#include "models/deepspeed_schedule.hpp"
#include "models/planner.hpp"
#include "sim/executor.hpp"
#include "sim_fixtures.hpp"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

// One line per (pp, m, stage) of the files in tests/data/deepspeed, printed by
// iterating the source's TrainSchedule (their header says which version).
void check_against_source(ScheduleKind kind, const std::string& file) {
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/tests/data/deepspeed/" + file);
  REQUIRE(in.good());
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream head(line);
    int pp = 0, m = 0, stage = 0;
    head >> pp >> m >> stage;
    const std::string expected = line.substr(line.find(' ', line.find(' ', line.find(' ') + 1) + 1) + 1);
    std::string got;
    const auto steps = deepspeed_train_steps(kind, pp, stage, m);
    for (std::size_t t = 0; t < steps.size(); ++t) {
      if (t > 0) got += " | ";
      for (std::size_t i = 0; i < steps[t].size(); ++i) {
        if (i > 0) got += " ";
        got += to_string(steps[t][i], kind, pp, stage, m);
      }
    }
    CAPTURE(pp);
    CAPTURE(m);
    CAPTURE(stage);
    CHECK(got == expected);
    ++lines;
  }
  CHECK(lines == 2 * (2 + 4));  // p = 2 and 4, m = 4 and 8, every stage
}

// A pipeline of identical stages: 8 layers, embedding and head negligible,
// memory-bound passes free; transfers over the scale-up domain.
struct UniformPipeline {
  TransformerSpec model;
  ParallelSpec par;
  TrainingSpec train;
  ClusterSpec spec;
  UniformPipeline(int pp, int m) : spec(toy_cluster(1, pp)) {
    model.name = "uniform";
    model.layers = 8;
    model.hidden = 1024;
    model.heads = 16;
    model.kv_heads = 16;
    model.ffn_hidden = 4096;
    model.vocab = 8;
    model.rope = true;
    model.rmsnorm = true;
    par.pp = pp;
    par.global_batch = m;
    par.pp_overlap = false;  // DeepSpeed's and Megatron-LM 2021's blocking send/recv
    train.seq_len = 1024;
    spec.groups[0].node.gpu.memory_bandwidth = 1e18;
    spec.groups[0].node.scaleup_bandwidth = 20e9;  // a transfer of 2 MiB: about a tenth of a pass
  }
  // Makespan, and the duration of one activation (gradient) message.
  std::pair<double, double> run(ScheduleKind kind) {
    par.schedule = kind;
    const Cluster cluster(spec);
    const std::vector<CalibrationProfile> profiles{ideal_profile()};
    const ComputeCostModel costs(cluster, profiles);
    const AnalyticalNetwork net(cluster, profiles);
    const TrainingPlan plan = plan_training(model, par, train, cluster, PlanOptions{});
    Executor ex(plan.setup, cluster, costs, net);
    const SimulationResult r = ex.run();
    REQUIRE(r.completed);
    double message = 0;
    for (const Interval& i : r.timelines[plan.recorded_rank_of_stage[0]].intervals) {
      if (i.category == 1 + static_cast<int>(CommClass::PP))
        message = std::max(message, (i.end - i.start).to_seconds());
    }
    return {r.makespan.to_seconds(), message};
  }
};

}  // namespace

TEST_CASE("DeepSpeed's TrainSchedule: each stage's commands are the source's") {
  check_against_source(ScheduleKind::DeepSpeed1F1B, "train_schedule_v0.16.5.txt");
  check_against_source(ScheduleKind::DeepSpeed1F1BLegacy, "train_schedule_v0.8.2.txt");
}

TEST_CASE("DeepSpeed's TrainSchedule runs 1F1B's passes in 1F1B's order") {
  for (ScheduleKind kind : {ScheduleKind::DeepSpeed1F1B, ScheduleKind::DeepSpeed1F1BLegacy}) {
    for (int pp : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 4, 5, 8}) {
        CAPTURE(pp);
        CAPTURE(m);
        const PipelineSchedule s = builtin_schedule(kind, pp, m, 1);
        CHECK(s.name == to_string(kind));
        CHECK(s.units == builtin_schedule(ScheduleKind::OneFOneB, pp, m, 1).units);
        CHECK(check_schedule(s).empty());
        // 2(m + p - 1) steps; the last one ends with the gradient reduction and the step.
        const auto steps = deepspeed_train_steps(kind, pp, pp - 1, m);
        CHECK(steps.size() == static_cast<std::size_t>(2 * (m + pp - 1)));
        CHECK(steps.back().back() == DeepSpeedCommand{DeepSpeedOp::OptimizerStep, -1});
      }
    }
  }
}

// On two stages, with F and B a stage's forward and backward and c one
// message, the 1F1B of blocking sends (receives posted ahead) reaches a period
// of F + B + c per micro-batch: the activation and the gradient cross at the
// same time in opposite directions. TrainSchedule's steps pair each forward
// slot's SendGrad, RecvActivation with the neighbour's RecvGrad,
// SendActivation, one after the other: F + B + 2c. Written out step by step,
// 1F1B ends at (m+1)(F+B) + (m+1)c and TrainSchedule at (m+1)(F+B) + 2mc, so
// TrainSchedule is (m-1)c longer, in both of its orders.
TEST_CASE("DeepSpeed's TrainSchedule exposes one more message per micro-batch than 1F1B on two stages") {
  for (int m : {4, 8}) {
    CAPTURE(m);
    UniformPipeline pipe(2, m);
    const auto [one, one_message] = pipe.run(ScheduleKind::OneFOneB);
    const auto [ds, c] = pipe.run(ScheduleKind::DeepSpeed1F1B);
    const auto [legacy, legacy_c] = pipe.run(ScheduleKind::DeepSpeed1F1BLegacy);
    REQUIRE(c > 0);
    CHECK(one_message == doctest::Approx(c));
    CHECK(c < 0.2 * one / (m + 1));  // a message is small beside a pass: the derivation's regime
    CHECK(ds - one == doctest::Approx((m - 1) * c).epsilon(1e-6));
    CHECK(legacy == doctest::Approx(ds).epsilon(1e-9));
  }
}
// On more stages an interior stage runs four blocking messages per micro-batch
// in TrainSchedule's steady state (SendGrad, RecvActivation, RecvGrad,
// SendActivation) where the 1F1B of blocking sends waits for its two sends
// only: the steady period is F + B + 4c against F + B + 2c, so four more
// micro-batches add 8c more to TrainSchedule than to 1F1B (measured: 5c more
// at m = 4, 13c at m = 8).
TEST_CASE("DeepSpeed's TrainSchedule on four stages: two more messages per micro-batch in the steady state") {
  auto excess = [](int m, double* message) {
    UniformPipeline pipe(4, m);
    const double one = pipe.run(ScheduleKind::OneFOneB).first;
    const auto [ds, c] = pipe.run(ScheduleKind::DeepSpeed1F1B);
    CHECK(pipe.run(ScheduleKind::DeepSpeed1F1BLegacy).first == doctest::Approx(ds).epsilon(1e-9));
    *message = c;
    return ds - one;
  };
  double c4 = 0, c8 = 0;
  const double at4 = excess(4, &c4), at8 = excess(8, &c8);
  REQUIRE(c4 > 0);
  CHECK(c8 == doctest::Approx(c4));
  CHECK(at4 > 3 * c4);  // more than the two-stage (m-1)c
  CHECK(at8 - at4 == doctest::Approx(8 * c4).epsilon(1e-6));
}
