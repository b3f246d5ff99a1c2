#include "models/schedule_timing.hpp"

#include <algorithm>
#include <cstddef>

namespace trainsim {

double ScheduleTiming::bubble_rate() const {
  if (makespan <= 0 || busy.empty()) return 0;
  const double most = *std::max_element(busy.begin(), busy.end());
  return (makespan - most) / makespan;
}

double ScheduleTiming::span_bubble_rate() const {
  double rate = 0;
  for (std::size_t r = 0; r < busy.size(); ++r) {
    const double span = last_end[r] - first_start[r];
    if (span > 0) rate = std::max(rate, (span - busy[r]) / span);
  }
  return rate;
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
  out.unit_end.resize(s.stages);
  out.unit_start.resize(s.stages);
  std::vector<std::size_t> pos(s.stages, 0);
  // When unit u on rank st may start (kNotYet: its input does not exist yet), and how long it runs.
  auto ready_of = [&](int st, const ScheduleUnit& u) {
    const int v = s.virtual_stage(st, u.chunk);
    if (u.kind == UnitKind::Forward) {
      const int prev = s.prev_chunk(v);
      if (prev < 0) return 0.0;
      const double in = at(fend, prev, u.microbatch);
      return in == kNotYet ? kNotYet : in + (s.chunk_stage[prev] != st ? t.transfer : 0);
    }
    if (u.kind == UnitKind::BackwardWeight) return 0.0;
    const int next = s.next_chunk(v);
    if (next < 0) return at(fend, v, u.microbatch);
    const double in = at(bend, next, u.microbatch);
    return in == kNotYet ? kNotYet : in + (s.chunk_stage[next] != st ? t.transfer : 0);
  };
  auto length_of = [&](const ScheduleUnit& u) {
    switch (u.kind) {
      case UnitKind::Forward:
        return t.forward;
      case UnitKind::BackwardWeight:
        return t.backward_weight;
      case UnitKind::BackwardInput:
        return t.backward_input;
      case UnitKind::Backward:
        return t.backward_input + t.backward_weight;
    }
    return 0.0;
  };
  // Each sweep advances every rank as far as its inputs exist; a valid
  // schedule completes (check_schedule's abstract execution). An overlapped
  // pair starts when both inputs exist and runs its passes back to back;
  // both outputs leave at its end (the unit model has no communication to hide).
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < s.stages; ++st) {
      const auto& units = s.units[st];
      while (pos[st] < units.size()) {
        const std::size_t n = pos[st] + 1 < units.size() && units[pos[st] + 1].overlapped ? 2 : 1;
        double ready = 0, length = 0;
        bool waiting = false;
        for (std::size_t k = 0; k < n; ++k) {
          const double r = ready_of(st, units[pos[st] + k]);
          waiting = waiting || r == kNotYet;
          ready = std::max(ready, r);
          length += length_of(units[pos[st] + k]);
        }
        if (waiting) break;
        const double start = std::max(ready, out.last_end[st]);
        const double end = start + length;
        if (out.first_start[st] < 0) out.first_start[st] = start;
        out.last_end[st] = end;
        out.busy[st] += length;
        for (std::size_t k = 0; k < n; ++k) {
          const ScheduleUnit& u = units[pos[st] + k];
          out.unit_end[st].push_back(end);
          out.unit_start[st].push_back(start);
          const int v = s.virtual_stage(st, u.chunk);
          if (u.kind == UnitKind::Forward) at(fend, v, u.microbatch) = end;
          // A whole backward sends its input gradient when it ends (as 1F1B is counted in the paper).
          if (u.kind == UnitKind::Backward || u.kind == UnitKind::BackwardInput) at(bend, v, u.microbatch) = end;
        }
        pos[st] += n;
        progress = true;
      }
    }
  }
  for (int st = 0; st < s.stages; ++st) out.makespan = std::max(out.makespan, out.last_end[st]);
  out.forward_end = std::move(fend);
  out.input_grad_end = std::move(bend);
  return out;
}

std::vector<std::vector<int>> receive_posts(const PipelineSchedule& s, const PassTimes& t, bool sorted) {
  const ScheduleTiming timing = time_schedule(s, t);
  const auto m = static_cast<std::size_t>(s.microbatches);
  std::vector<std::vector<int>> posts(s.stages);
  for (int st = 0; st < s.stages; ++st) {
    const auto& units = s.units[st];
    // The first unit ending (sorted: starting) at or after the sender's completion.
    const auto& ends = sorted ? timing.unit_start[st] : timing.unit_end[st];
    posts[st].assign(units.size(), -1);
    for (std::size_t i = 0; i < units.size(); ++i) {
      const ScheduleUnit& u = units[i];
      const int v = s.virtual_stage(st, u.chunk);
      // The chunk the input comes from and when its sender completes.
      int from = -1;
      double sent = 0;
      if (u.kind == UnitKind::Forward) {
        from = s.prev_chunk(v);
        if (from >= 0) sent = timing.forward_end[static_cast<std::size_t>(from) * m + u.microbatch];
      } else if (u.kind == UnitKind::Backward || u.kind == UnitKind::BackwardInput) {
        from = s.next_chunk(v);
        if (from >= 0) sent = timing.input_grad_end[static_cast<std::size_t>(from) * m + u.microbatch];
      }
      if (from < 0 || s.chunk_stage[from] == st) continue;
      const auto first_ending = std::lower_bound(ends.begin(), ends.begin() + static_cast<std::ptrdiff_t>(i), sent);
      posts[st][i] = static_cast<int>(first_ending - ends.begin()) - 1;
    }
  }
  return posts;
}

}  // namespace trainsim
