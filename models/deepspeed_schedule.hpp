#pragma once
// DeepSpeed's pipeline instruction order (`TrainSchedule`, deepspeed/runtime/
// pipe/schedule.py): 2(m + p - 1) steps per stage, each a forward or a backward
// slot by the parities of step and stage, each slot's blocking send/recv
// commands before its pass. The forward's output leaves in the stage's next
// step, so the engine's transfers pair with the neighbour's opposite commands.
#include <cstdint>
#include <string>
#include <vector>

#include "models/schedule.hpp"

namespace trainsim {

// One command of the engine's `_exec_schedule` loop (the PipeInstruction
// subclasses). `microbatch` is the micro-batch the command's buffer holds, -1
// for the step's end commands.
enum class DeepSpeedOp : std::uint8_t {
  LoadMicroBatch,
  ForwardPass,
  BackwardPass,
  SendActivation,
  RecvActivation,
  SendGrad,
  RecvGrad,
  ReduceTiedGrads,
  ReduceGrads,
  OptimizerStep
};
struct DeepSpeedCommand {
  DeepSpeedOp op = DeepSpeedOp::ForwardPass;
  int microbatch = -1;
  bool operator==(const DeepSpeedCommand&) const = default;
};

// The steps of stage `stage` of `pp` for `m` micro-batches, each the commands
// in the engine's order. `ScheduleKind::DeepSpeed1F1B` is the order of
// DeepSpeed v0.8.3 on (PR #2862, March 2023: a forward slot sends the previous
// gradient, then receives; a backward slot receives, then sends the previous
// activation); `DeepSpeed1F1BLegacy` the order of v0.3 to v0.8.2 (receive and
// send swapped in both slots).
std::vector<std::vector<DeepSpeedCommand>> deepspeed_train_steps(ScheduleKind kind, int pp, int stage, int m);

// The command as the engine prints it (`ForwardPass(buffer_id=1)`), the buffer
// being the micro-batch modulo TrainSchedule.num_pipe_buffers() of that version.
std::string to_string(const DeepSpeedCommand& c, ScheduleKind kind, int pp, int stage, int m);

// The units of the passes in step order (per stage: min(m, p - i) forwards,
// then one backward one forward: 1F1B's order), backward units whole.
PipelineSchedule deepspeed_schedule(ScheduleKind kind, int pp, int m);

bool is_deepspeed_schedule(ScheduleKind kind);

}  // namespace trainsim
