#include "models/schedule_timing.hpp"

#include <algorithm>
#include <cstddef>

namespace trainsim {

double ScheduleTiming::bubble_rate() const {
  if (makespan <= 0 || busy.empty()) return 0;
  const double most = *std::max_element(busy.begin(), busy.end());
  return (makespan - most) / makespan;
}

ScheduleTiming time_schedule(const PipelineSchedule& s, const PassTimes& t) {
  const int V = s.chunks();
  const int m = s.microbatches;
  constexpr double kNotYet = -1;
  // End time of the forward / input-gradient of (chunk v, micro-batch).
  std::vector<double> fend(static_cast<std::size_t>(V) * m, kNotYet), bend(fend);
  auto at = [m](std::vector<double>& x, int v, int mb) -> double& { return x[static_cast<std::size_t>(v) * m + mb]; };
  ScheduleTiming out;
  out.busy.assign(s.stages, 0);
  out.first_start.assign(s.stages, -1);
  out.last_end.assign(s.stages, 0);
  std::vector<std::size_t> pos(s.stages, 0);
  // Each sweep advances every rank as far as its inputs exist; a valid
  // schedule completes (check_schedule's abstract execution).
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < s.stages; ++st) {
      for (; pos[st] < s.units[st].size(); ++pos[st]) {
        const ScheduleUnit& u = s.units[st][pos[st]];
        const int v = s.virtual_stage(st, u.chunk);
        double ready = 0, length = 0;
        if (u.kind == UnitKind::Forward) {
          if (v > 0) {
            const double in = at(fend, v - 1, u.microbatch);
            if (in == kNotYet) break;
            ready = in + (s.chunk_stage[v - 1] != st ? t.transfer : 0);
          }
          length = t.forward;
        } else if (u.kind == UnitKind::BackwardWeight) {
          length = t.backward_weight;
        } else {
          if (v < V - 1) {
            const double in = at(bend, v + 1, u.microbatch);
            if (in == kNotYet) break;
            ready = in + (s.chunk_stage[v + 1] != st ? t.transfer : 0);
          } else {
            ready = at(fend, v, u.microbatch);
          }
          length = t.backward_input + (u.kind == UnitKind::Backward ? t.backward_weight : 0);
        }
        const double start = std::max(ready, out.last_end[st]);
        const double end = start + length;
        if (out.first_start[st] < 0) out.first_start[st] = start;
        out.last_end[st] = end;
        out.busy[st] += length;
        if (u.kind == UnitKind::Forward) at(fend, v, u.microbatch) = end;
        // A whole backward sends its input gradient when it ends (as 1F1B is counted in the paper).
        if (u.kind == UnitKind::Backward || u.kind == UnitKind::BackwardInput) at(bend, v, u.microbatch) = end;
        progress = true;
      }
    }
  }
  for (int st = 0; st < s.stages; ++st) out.makespan = std::max(out.makespan, out.last_end[st]);
  return out;
}

}  // namespace trainsim
