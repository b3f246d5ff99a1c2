#include "models/pipedream.hpp"

namespace trainsim {

bool asynchronous_pipeline(ScheduleKind kind) {
  return kind == ScheduleKind::PipeDream || kind == ScheduleKind::PipeDream2BW;
}

int weight_versions(ScheduleKind kind, int pp, int stage) {
  if (kind == ScheduleKind::PipeDream) return pp - stage;
  return kind == ScheduleKind::PipeDream2BW ? 2 : 1;
}

int weight_staleness(ScheduleKind kind, int pp, int stage) {
  if (kind == ScheduleKind::PipeDream) return pp - 1 - stage;
  return kind == ScheduleKind::PipeDream2BW ? 1 : 0;
}

int optimizer_steps_per_iteration(ScheduleKind kind, int m) { return kind == ScheduleKind::PipeDream ? m : 1; }

}  // namespace trainsim
