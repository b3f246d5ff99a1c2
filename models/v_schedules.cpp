#include "models/v_schedules.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <set>
#include <utility>

#include "sim/check.hpp"

namespace trainsim {

std::vector<int> v_chunk_stages(int pp) {
  std::vector<int> stages;
  for (int v = 0; v < 2 * pp; ++v) stages.push_back(v < pp ? v : 2 * pp - 1 - v);
  return stages;
}

namespace {

// One member of the ZB-V family: the greedy run of the ranks (see the header)
// where a rank also keeps at most `in_flight` micro-batches between its chunk-0
// forward and chunk-0 backward, and, with `weights_first`, runs a pending W
// before an F once its activations pass half the limit.
PipelineSchedule zero_bubble_v_member(int pp, int m, const PassTimes& t, double memory_limit,
                                      double weight_input_fraction, int in_flight, bool weights_first) {
  PipelineSchedule s;
  s.name = "zb-v";
  s.stages = pp;
  s.microbatches = m;
  s.chunk_stage = v_chunk_stages(pp);
  s.units.assign(pp, {});
  const int V = 2 * pp;
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  // End of the forward / input gradient of (chunk v, micro-batch).
  std::vector<double> fend(static_cast<std::size_t>(V) * m, kNotYet), bend(fend);
  auto at = [m](std::vector<double>& x, int v, int mb) -> double& { return x[static_cast<std::size_t>(v) * m + mb]; };
  struct RankState {
    double now = 0;
    double live = 0;  // activations held, in one chunk's micro-batch activations
    int f[2] = {0, 0}, b[2] = {0, 0};
    std::deque<ScheduleUnit> pending_w;
    bool blocked = false;
  };
  std::vector<RankState> ranks(pp);
  const std::size_t units_per_rank = 6 * static_cast<std::size_t>(m);
  auto vstage = [pp](int st, int chunk) { return chunk == 0 ? st : 2 * pp - 1 - st; };
  auto arrival = [&](int st, int from_v, double end) { return end + (s.chunk_stage[from_v] != st ? t.transfer : 0); };
  // The ranks that can act, by (time, rank): the earliest goes next. A rank
  // that waits for a unit no rank has placed yet leaves the set until the
  // rank that feeds it places a unit.
  std::set<std::pair<double, int>> active;
  for (int st = 0; st < pp; ++st) active.emplace(0.0, st);
  auto wake = [&](int st) {
    if (!ranks[st].blocked) return;
    ranks[st].blocked = false;
    active.emplace(ranks[st].now, st);
  };
  while (!active.empty()) {
    const int r = active.begin()->second;
    active.erase(active.begin());
    RankState& R = ranks[r];
    // The ready units, in priority order: B of the later chunk, B, F of the later chunk, F.
    double next_ready = kNotYet;
    ScheduleUnit pick;
    bool found = false;
    auto consider = [&](UnitKind kind, int chunk, double ready) {
      if (found) return;
      if (ready <= R.now) {
        pick = ScheduleUnit{kind, kind == UnitKind::Forward ? R.f[chunk] : R.b[chunk], chunk};
        found = true;
      } else {
        next_ready = std::min(next_ready, ready);
      }
    };
    for (int chunk = 1; chunk >= 0; --chunk) {
      const int mb = R.b[chunk];
      if (mb >= R.f[chunk]) continue;
      const int v = vstage(r, chunk);
      consider(UnitKind::BackwardInput, chunk, v == V - 1 ? at(fend, v, mb) : arrival(r, v + 1, at(bend, v + 1, mb)));
    }
    if (weights_first && !R.pending_w.empty() && R.live > memory_limit / 2) {
      pick = R.pending_w.front();
      found = true;
    }
    for (int chunk = 1; chunk >= 0; --chunk) {
      const int mb = R.f[chunk];
      if (chunk == 0 && R.f[0] - R.b[0] >= in_flight) continue;
      // A micro-batch entering chunk 0 keeps room for its forward through
      // chunk 1 on this rank, so every one admitted can reach the end of the V
      // (and its backward free memory): no rank fills up with chunk-0 work.
      const double needs = chunk == 0 ? 2.0 + (R.f[0] - R.f[1]) : 1.0;
      if (mb >= m || R.live + needs > memory_limit + 1e-9) continue;
      const int v = vstage(r, chunk);
      consider(UnitKind::Forward, chunk, v == 0 ? 0.0 : arrival(r, v - 1, at(fend, v - 1, mb)));
    }
    if (!found && !R.pending_w.empty()) {
      pick = R.pending_w.front();
      found = true;
    }
    if (!found) {
      if (next_ready < kNotYet) {
        R.now = next_ready;
        active.emplace(R.now, r);
      } else {
        R.blocked = true;  // waits for a unit another rank has not placed yet
      }
      continue;
    }
    const int v = vstage(r, pick.chunk);
    double length = 0;
    switch (pick.kind) {
      case UnitKind::Forward:
        length = t.forward;
        R.live += 1;
        at(fend, v, pick.microbatch) = R.now + length;
        ++R.f[pick.chunk];
        break;
      case UnitKind::BackwardInput:
        length = t.backward_input;
        R.live += weight_input_fraction - 1;
        at(bend, v, pick.microbatch) = R.now + length;
        ++R.b[pick.chunk];
        R.pending_w.push_back(ScheduleUnit{UnitKind::BackwardWeight, pick.microbatch, pick.chunk});
        break;
      default:
        length = t.backward_weight;
        R.live -= weight_input_fraction;
        R.pending_w.pop_front();
        break;
    }
    R.now += length;
    s.units[r].push_back(pick);
    if (s.units[r].size() < units_per_rank) active.emplace(R.now, r);
    // Only the rank of the next (F) or previous (B) chunk consumes this unit's output.
    if (pick.kind == UnitKind::Forward && v + 1 < V) wake(s.chunk_stage[v + 1]);
    if (pick.kind == UnitKind::BackwardInput && v > 0) wake(s.chunk_stage[v - 1]);
  }
  for (int st = 0; st < pp; ++st) {
    if (s.units[st].size() != units_per_rank) return PipelineSchedule{};  // stuck: not a member
  }
  return s;
}

}  // namespace

PipelineSchedule zero_bubble_v_schedule(int pp, int m, const PassTimes& t, double memory_limit,
                                        double weight_input_fraction) {
  // As the paper's automatic scheduler does for ZB-1p and ZB-2p: candidates
  // timed on the unit-level model, the fastest kept (ties: the first).
  PipelineSchedule best;
  double best_time = 0;
  // Caps 1 to 2p; beyond p = 32 in steps of p/16 (at most 32 caps).
  const int step = std::max(1, pp / 16);
  for (int in_flight = 1; in_flight <= 2 * pp; in_flight += step) {
    for (bool weights_first : {false, true}) {
      PipelineSchedule s =
          zero_bubble_v_member(pp, m, t, memory_limit, weight_input_fraction, in_flight, weights_first);
      if (s.units.empty()) continue;
      const double time = time_schedule(s, t).makespan;
      if (best.units.empty() || time < best_time * (1 - 1e-12)) {
        best = std::move(s);
        best_time = time;
      }
    }
  }
  TRAINSIM_CHECK(!best.units.empty(),
                 "ZB-V: no schedule fits a memory limit of " + std::to_string(memory_limit) + " chunk activations");
  return best;
}

PipelineSchedule dualpipe_v_schedule(int pp, int m) {
  TRAINSIM_CHECK(pp >= 1 && m >= 2 * pp, "DualPipeV needs at least 2 * pp micro-batches");
  PipelineSchedule s;
  s.name = "dualpipe-v";
  s.stages = pp;
  s.microbatches = m;
  s.chunk_stage = v_chunk_stages(pp);
  for (int i = 0; i < pp; ++i) {
    std::vector<ScheduleUnit> order;
    int f[2] = {0, 0}, b[2] = {0, 0};
    std::deque<ScheduleUnit> pending_w;  // weight gradients of split backwards, oldest first
    auto F = [&](int c, bool overlapped = false) {
      order.push_back(ScheduleUnit{UnitKind::Forward, f[c]++, c, overlapped});
    };
    auto B = [&](int c, bool split, bool overlapped = false) {
      order.push_back(ScheduleUnit{split ? UnitKind::BackwardInput : UnitKind::Backward, b[c], c, overlapped});
      if (split) pending_w.push_back(ScheduleUnit{UnitKind::BackwardWeight, b[c], c});
      ++b[c];
    };
    auto W = [&] {
      order.push_back(pending_w.front());
      pending_w.pop_front();
    };
    const int tail = pp - i - 1;  // ranks after this one
    for (int k = 0; k < 2 * tail; ++k) F(0);
    for (int k = 0; k < i + 1; ++k) {
      F(0);
      F(1);
    }
    for (int k = 0; k < tail; ++k) {
      B(1, true);
      W();
      F(1);
    }
    for (int k = 0; k < m - 2 * pp + i + 1; ++k) {
      F(0);
      B(1, false, true);
      F(1);
      B(0, false, true);
    }
    for (int k = 0; k < tail; ++k) {
      B(1, false);
      F(1);
      B(0, false, true);
    }
    // The cooldown: the second half of the backwards leaves W to fill the gaps.
    const int half = (i + 1) / 2;
    for (int k = 0; k < i + 1; ++k) {
      const bool later = k > half || (k == half && i % 2 == 1);
      B(1, later);
      B(0, k >= half);
    }
    for (int k = 0; k < tail; ++k) {
      W();
      B(0, true);
    }
    while (!pending_w.empty()) W();
    s.units.push_back(std::move(order));
  }
  return s;
}

}  // namespace trainsim
