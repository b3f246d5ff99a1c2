#include "models/deepspeed_schedule.hpp"

#include <algorithm>

#include "sim/check.hpp"

namespace trainsim {

namespace {

// TrainSchedule._step_to_micro_batch: on an even stage even steps are forward
// slots, on an odd stage odd ones; the micro-batch of each slot from
// _even_step_forward_id, _odd_step_forward_id, _even_step_backward_id and
// _odd_step_backward_id (Python's floor division; negative or >= m: idle).
struct Slot {
  int microbatch;
  bool forward;
};
int floor_div2(int x) { return x >= 0 ? x / 2 : -((1 - x) / 2); }
Slot slot_of(int step, int stage, int pp) {
  const bool even_step = step % 2 == 0, even_stage = stage % 2 == 0;
  if (even_step && even_stage) return {floor_div2(step) - stage / 2, true};
  if (!even_step && !even_stage) return {floor_div2(step - 1) - stage / 2, true};
  if (even_step) return {floor_div2(step) - pp + (stage + 1) / 2, false};
  return {floor_div2(step - 1) - pp + 1 + stage / 2, false};
}

}  // namespace

bool is_deepspeed_schedule(ScheduleKind kind) {
  return kind == ScheduleKind::DeepSpeed1F1B || kind == ScheduleKind::DeepSpeed1F1BLegacy;
}

std::vector<std::vector<DeepSpeedCommand>> deepspeed_train_steps(ScheduleKind kind, int pp, int stage, int m) {
  TRAINSIM_CHECK(is_deepspeed_schedule(kind) && pp >= 1 && m >= 1 && stage >= 0 && stage < pp,
                 "DeepSpeed's TrainSchedule needs a stage of the pipeline and a micro-batch");
  const bool legacy = kind == ScheduleKind::DeepSpeed1F1BLegacy;
  auto valid = [m](int mb) { return mb >= 0 && mb < m; };
  const bool has_prev = stage > 0, has_next = stage + 1 < pp;
  const int total = 2 * (m + pp - 1);
  std::vector<std::vector<DeepSpeedCommand>> steps(total);
  int prev = -1;
  for (int step = 0; step < total; ++step) {
    const Slot slot = slot_of(step, stage, pp);
    const int mb = slot.microbatch;
    std::vector<DeepSpeedCommand>& cmds = steps[step];
    // Exchange activations (the two blocking transfers of the slot).
    DeepSpeedCommand first{}, second{};
    bool first_on = false, second_on = false;
    if (slot.forward) {
      first = {DeepSpeedOp::SendGrad, prev};
      first_on = valid(prev) && has_prev;
      second = {DeepSpeedOp::RecvActivation, mb};
      second_on = valid(mb) && has_prev;
    } else {
      first = {DeepSpeedOp::RecvGrad, mb};
      first_on = valid(mb) && has_next;
      second = {DeepSpeedOp::SendActivation, prev};
      second_on = valid(prev) && has_next;
    }
    if (legacy) {
      std::swap(first, second);
      std::swap(first_on, second_on);
    }
    if (first_on) cmds.push_back(first);
    if (second_on) cmds.push_back(second);
    if ((stage == 0 || stage == pp - 1) && slot.forward && valid(mb)) cmds.push_back({DeepSpeedOp::LoadMicroBatch, mb});
    if (valid(mb)) cmds.push_back({slot.forward ? DeepSpeedOp::ForwardPass : DeepSpeedOp::BackwardPass, mb});
    if (step == total - 1) {
      cmds.push_back({DeepSpeedOp::ReduceTiedGrads, -1});
      cmds.push_back({DeepSpeedOp::ReduceGrads, -1});
      cmds.push_back({DeepSpeedOp::OptimizerStep, -1});
    }
    prev = mb;
  }
  return steps;
}

std::string to_string(const DeepSpeedCommand& c, ScheduleKind kind, int pp, int stage, int m) {
  static const char* const names[] = {"LoadMicroBatch", "ForwardPass",  "BackwardPass", "SendActivation",
                                      "RecvActivation", "SendGrad",     "RecvGrad",     "ReduceTiedGrads",
                                      "ReduceGrads",    "OptimizerStep"};
  std::string s = names[static_cast<int>(c.op)];
  if (c.microbatch < 0) return s + "()";
  // TrainSchedule.num_pipe_buffers: max(2, min(stages - stage_id, micro_batches)),
  // one more than stages - stage_id before v0.8.3.
  const int in_flight = pp - stage + (kind == ScheduleKind::DeepSpeed1F1BLegacy ? 1 : 0);
  const int buffers = std::max(2, std::min(in_flight, m));
  return s + "(buffer_id=" + std::to_string(c.microbatch % buffers) + ")";
}

PipelineSchedule deepspeed_schedule(ScheduleKind kind, int pp, int m) {
  PipelineSchedule s;
  s.name = to_string(kind);
  s.stages = pp;
  s.microbatches = m;
  s.chunk_stage.resize(pp);
  for (int v = 0; v < pp; ++v) s.chunk_stage[v] = v;
  for (int stage = 0; stage < pp; ++stage) {
    std::vector<ScheduleUnit> units;
    for (const auto& step : deepspeed_train_steps(kind, pp, stage, m)) {
      for (const DeepSpeedCommand& c : step) {
        if (c.op == DeepSpeedOp::ForwardPass) units.push_back({UnitKind::Forward, c.microbatch, 0});
        if (c.op == DeepSpeedOp::BackwardPass) units.push_back({UnitKind::Backward, c.microbatch, 0});
      }
    }
    s.units.push_back(std::move(units));
  }
  return s;
}

}  // namespace trainsim
