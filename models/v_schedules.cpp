#include "models/v_schedules.hpp"

#include <algorithm>
#include <array>
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

// The Zero Bubble authors' ZB-V construction (PipelineGraph.try_v_schedule in
// megatron/core/pipeline_parallel/zerobubble/scheduler/zbv.py of
// github.com/sail-sg/zero-bubble-pipeline-parallelism), ported unit for unit:
// a warmup that fills each rank with chunk-0 forwards as memory and the
// arrival of its first chunk-1 input allow, then rounds of one B per rank
// (the V's second leg when its gradient has arrived) and one F per rank, with
// pending W passes put where they fill the wait for a neighbour's output or
// where the rank's bubble so far is below the worst rank's. It is rerun with
// the bubbles of the previous run approved until the worst bubble stops
// shrinking. Its graph's "chunk" of a B or W counts from the V's turn (0 is
// the second leg); the units below use the V's leg (0 going down, 1 up).
class PaperVGraph {
 public:
  PaperVGraph(int pp, int m, const PassTimes& t, double memory_limit, double weight_input_fraction)
      : pp_(pp),
        m_(m),
        cost_{t.forward, t.backward_input, t.backward_weight},
        comm_(t.transfer),
        mem_{1.0, weight_input_fraction - 1.0, -weight_input_fraction},
        max_mem_(memory_limit) {}

  // The schedule of one fill setting (empty when the construction's
  // preconditions fail for this shape), and its worst rank's bubble.
  struct Result {
    std::vector<std::vector<ScheduleUnit>> units;
    double max_bubble = 0;
    bool ok = false;
  };
  Result run(bool fill_f, bool fill_b) { return attempt(fill_f, fill_b, {}, 0); }

 private:
  int pp_, m_;
  double cost_[3], comm_, mem_[3], max_mem_;

  std::size_t id(int cat, int chunk, int stage, int micro) const {
    return ((static_cast<std::size_t>(cat) * 2 + chunk) * pp_ + stage) * m_ + micro;
  }

  Result attempt(bool fill_f, bool fill_b, const std::vector<double>& approved, int depth) {
    // Mirrors the recursion of try_v_schedule; each level must lower the worst
    // bubble, the depth bound only guards against a float plateau.
    constexpr int kMaxRefinements = 64;
    std::vector<std::array<int, 6>> count(pp_, std::array<int, 6>{});
    std::vector<double> end(6 * static_cast<std::size_t>(pp_) * m_, -1.0);
    std::vector<double> cur(pp_, 0.0), mem(pp_, 0.0), bubble(pp_, 0.0);
    std::vector<std::deque<int>> pending_w(pp_);  // graph chunk of each pending W
    Result r;
    r.units.assign(pp_, {});
    bool failed = false;
    const double max_approved = approved.empty() ? -1.0 : *std::max_element(approved.begin(), approved.end());
    auto max_stage_bubble = [&](int stage) {
      double b = *std::max_element(bubble.begin(), bubble.end());
      if (stage >= 0 && !approved.empty()) b = std::max(b, max_approved - approved[stage]);
      return b;
    };
    auto put = [&](int cat, int chunk, int stage) {
      if (failed) return;
      const int cnt = count[stage][cat * 2 + chunk];
      const double no_bubble = cur[stage] + cost_[cat];
      if (cnt >= m_ || mem[stage] + mem_[cat] > max_mem_ + 1e-9) {
        failed = true;
        return;
      }
      // The unit this one follows on the same rank must exist.
      if (cat > 0 || chunk > 0) {
        const int last = cat * 2 + chunk - 1;
        const std::size_t dep = cat < 2 ? id(last / 2, last % 2, stage, cnt) : id(1, chunk, stage, cnt);
        if (end[dep] < 0) {
          failed = true;
          return;
        }
      }
      double t = no_bubble;
      if (cat < 2) {
        const int from = chunk == 1 ? stage + 1 : stage - 1;
        if (from >= 0 && from < pp_) {
          const std::size_t dep = id(cat, chunk, from, cnt);
          if (end[dep] < 0) {
            failed = true;
            return;
          }
          t = std::max(t, end[dep] + comm_ + cost_[cat]);
        }
      }
      if (count[stage][0] > 0) bubble[stage] += t - no_bubble;
      end[id(cat, chunk, stage, cnt)] = t;
      cur[stage] = t;
      mem[stage] += mem_[cat];
      const UnitKind kind = cat == 0   ? UnitKind::Forward
                            : cat == 1 ? UnitKind::BackwardInput
                                       : UnitKind::BackwardWeight;
      r.units[stage].push_back(ScheduleUnit{kind, cnt, cat == 0 ? chunk : 1 - chunk});
      if (cat == 1) pending_w[stage].push_back(chunk);
      ++count[stage][cat * 2 + chunk];
    };
    auto put_w = [&](int stage) {
      if (pending_w[stage].empty()) {
        failed = true;
        return;
      }
      const int chunk = pending_w[stage].front();
      pending_w[stage].pop_front();
      put(2, chunk, stage);
    };
    // Before a unit that waits for `dep` (a neighbour's output), W passes that
    // end before it arrives, then one more where this rank's bubble is lower
    // than the worst rank's (`fill`).
    auto fill_before = [&](int stage, long dep_index, bool fill) {
      const double arrival = dep_index >= 0 ? end[static_cast<std::size_t>(dep_index)] + comm_ : -1.0 + comm_;
      while (!failed && !pending_w[stage].empty() && dep_index >= 0 && arrival >= cur[stage] + cost_[2]) put_w(stage);
      if (!failed && !pending_w[stage].empty() && arrival - cur[stage] > max_stage_bubble(stage) - bubble[stage] &&
          fill)
        put_w(stage);
    };
    // Warmup.
    for (int i = 0; i < pp_; ++i) put(0, 0, i);
    for (int i = pp_ - 1; i >= 0 && !failed; --i) {
      if (i == pp_ - 1) {
        put(0, 1, i);
        continue;
      }
      const double arrival = end[id(0, 1, i + 1, 0)] + comm_;
      while (!failed && mem[i] + mem_[0] * (2 + i * 2) <= max_mem_ + 1e-9 && cur[i] + cost_[0] <= arrival &&
             count[i][0] < m_) {
        for (int j = 0; j <= i; ++j) put(0, 0, j);
      }
      put(0, 1, i);
    }
    int iter_chunk = 0;
    for (int i = 1; i < pp_ && !failed; ++i) {
      while (!failed && (count[i][0] + count[i][1] < count[i - 1][0] + count[i - 1][1] ||
                         (count[i][1] <= count[i - 1][1] && count[i - 1][1] < m_))) {
        for (int j = pp_ - 1; j >= i; --j)
          if (count[j][iter_chunk] < m_) put(0, iter_chunk, j);
        iter_chunk = 1 - iter_chunk;
      }
    }
    // Rounds of one B, then one F, per rank.
    for (int round = 0; round < 2 * m_ && !failed; ++round) {
      for (int i = 0; i < pp_; ++i)
        while (!failed && mem[i] + mem_[1] > max_mem_ + 1e-9) put_w(i);
      std::vector<std::pair<int, int>> b_ranks;  // (rank, graph chunk)
      std::vector<int> b0, b1;
      for (int i = 0; i < pp_; ++i) {
        if (count[i][3] >= count[i][2]) {
          b0.push_back(i);
        } else if (i == pp_ - 1) {
          b1.push_back(i);
        } else if (end[id(1, 1, i + 1, count[i][3])] >= 0 || count[i][2] >= m_) {
          b1.push_back(i);
        } else {
          b0.push_back(i);
        }
      }
      for (auto it = b1.rbegin(); it != b1.rend(); ++it) b_ranks.emplace_back(*it, 1);
      for (int i : b0) b_ranks.emplace_back(i, 0);
      for (const auto& [i, chunk] : b_ranks) {
        if (failed) break;
        long dep = -1;
        if (chunk == 1 && i < pp_ - 1) dep = static_cast<long>(id(1, 1, i + 1, count[i][3]));
        if (chunk == 0 && i > 0) dep = static_cast<long>(id(1, 0, i - 1, count[i][2]));
        fill_before(i, dep, chunk == 1 || fill_b);
        put(1, chunk, i);
      }
      for (int i = 0; i < pp_ && !failed; ++i) {
        if (count[i][1] >= m_) continue;
        int item = -1;
        if (count[i][1] >= count[i][0]) {
          item = 0;
        } else if (i == pp_ - 1) {
          item = 1;
        } else if (end[id(0, 1, i + 1, count[i][1])] >= 0) {
          item = 1;
        } else if (count[i][0] < m_ && (i == 0 || end[id(0, 0, i - 1, count[i][0])] >= 0)) {
          item = 0;
        }
        if (item < 0) continue;
        while (!failed && mem[i] + mem_[0] > max_mem_ + 1e-9) put_w(i);
        long dep = -1;
        if (item == 0 && i > 0) dep = static_cast<long>(id(0, 0, i - 1, count[i][0]));
        if (item == 1 && i < pp_ - 1) dep = static_cast<long>(id(0, 1, i + 1, count[i][1]));
        fill_before(i, dep, fill_f);
        put(0, item, i);
      }
    }
    for (int i = 0; i < pp_ && !failed; ++i)
      while (!failed && !pending_w[i].empty()) put_w(i);
    if (failed) return Result{};
    for (int i = 0; i < pp_; ++i)
      if (r.units[i].size() != 6 * static_cast<std::size_t>(m_)) return Result{};
    r.ok = true;
    r.max_bubble = max_stage_bubble(-1);
    if ((max_approved < 0 || r.max_bubble < max_approved) && depth < kMaxRefinements) {
      Result refined = attempt(fill_f, fill_b, bubble, depth + 1);
      if (refined.ok && refined.max_bubble < r.max_bubble) return refined;
    }
    return r;
  }
};

}  // namespace

PipelineSchedule zero_bubble_v_schedule(int pp, int m, const PassTimes& t, double memory_limit,
                                        double weight_input_fraction) {
  // Candidates timed on the unit-level model, the fastest kept (ties: the
  // first): the authors' construction with its four fill settings, then the
  // greedy family, which covers the shapes the construction does not.
  PipelineSchedule best;
  double best_time = 0;
  PaperVGraph paper(pp, m, t, memory_limit, weight_input_fraction);
  for (bool fill_b : {true, false}) {
    for (bool fill_f : {true, false}) {
      PaperVGraph::Result r = paper.run(fill_f, fill_b);
      if (!r.ok) continue;
      PipelineSchedule s;
      s.name = "zb-v";
      s.stages = pp;
      s.microbatches = m;
      s.chunk_stage = v_chunk_stages(pp);
      s.units = std::move(r.units);
      if (!check_schedule(s).empty()) continue;
      const double time = time_schedule(s, t).makespan;
      if (best.units.empty() || time < best_time * (1 - 1e-12)) {
        best = std::move(s);
        best_time = time;
      }
    }
  }
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

PipelineSchedule dualpipe_schedule(int pp, int m) {
  TRAINSIM_CHECK(pp >= 2 && pp % 2 == 0 && m % 2 == 0 && m >= 2 * pp,
                 "DualPipe needs an even pp and an even m >= 2 * pp micro-batches");
  const PipelineSchedule half = dualpipe_v_schedule(pp / 2, m / 2);
  PipelineSchedule s;
  s.name = "dualpipe";
  s.stages = pp;
  s.microbatches = m / 2;
  s.chunk_stage = v_chunk_stages(pp);  // copy A on ranks 0..pp-1, copy B on pp-1..0
  s.route_chunks = pp;
  for (int r = 0; r < pp; ++r) {
    // Rank r holds chunk r (copy A, its chunk 0) and chunk 2pp-1-r (copy B, its chunk 1).
    const bool first_half = r < pp / 2;
    std::vector<ScheduleUnit> order = half.units[first_half ? r : pp - 1 - r];
    if (!first_half)
      for (ScheduleUnit& u : order) u.chunk = 1 - u.chunk;
    s.units.push_back(std::move(order));
  }
  return s;
}

}  // namespace trainsim
