#include "models/zero_bubble.hpp"

#include <algorithm>

namespace trainsim {

PipelineSchedule zero_bubble_auto_schedule(int pp, int m, const PassTimes& times, double memory_limit,
                                           double weight_input_fraction) {
  // The paper's heuristic: as many warmup forwards as memory allows, W passes
  // where they fill a gap; here the warmup depth and the W deferral are
  // searched, each candidate timed. ZB-H1 (no extra forward, deferral 1)
  // always fits a limit of p: it is the fallback.
  constexpr int kMaxDeferralPerRank = 3;
  PipelineSchedule best = zero_bubble_family(pp, m, 0, 1);
  double best_time = time_schedule(best, times).makespan;
  double best_memory = 0;
  auto peak_of = [&](const PipelineSchedule& s) {
    double peak = 0;
    for (int st = 0; st < pp; ++st) {
      peak = std::max(peak, peak_activation_bytes(s, st, [&](int) {
                        return ChunkActivation{1, weight_input_fraction};
                      }));
    }
    return peak;
  };
  best_memory = peak_of(best);
  for (int extra = 0; extra < pp; ++extra) {
    for (int deferral = 0; deferral <= kMaxDeferralPerRank; ++deferral) {
      PipelineSchedule s = zero_bubble_family(pp, m, extra, deferral);
      const double memory = peak_of(s);
      if (memory > memory_limit + 1e-9) continue;
      const double t = time_schedule(s, times).makespan;
      const double tolerance = 1e-9 * best_time;
      if (t < best_time - tolerance || (t <= best_time + tolerance && memory < best_memory - 1e-9)) {
        best = std::move(s);
        best_time = t;
        best_memory = memory;
      }
    }
  }
  return best;
}

}  // namespace trainsim

namespace trainsim {

bool zero_bubble_runtime_uses_heuristic(int pp, int m) { return 3L * pp * m >= 500; }

namespace {

using Tick = long long;  // microseconds, as the runtime's GraphConfig costs

struct ManualOrder {
  bool feasible = true;
  Tick span = 0;                                 // the longest rank span (the runtime's best_time)
  std::vector<std::vector<ScheduleUnit>> units;  // per rank, in placement order
};

// Graph.manual_order of the runtime, for one setting of its three flags.
ManualOrder manual_order(int p, int nmb, Tick cost_f, Tick cost_b, Tick cost_w, Tick comm, Tick max_mem,
                         bool allow_bubble_before_first_b, bool prioritize_b, bool no_bubble_greedy) {
  constexpr Tick kMem[3] = {2, -1, -1};
  const Tick cost[3] = {cost_f, cost_b, cost_w};
  const std::size_t per_type = static_cast<std::size_t>(p) * nmb;
  auto id = [&](int type, int stage, int mb) {
    return type * per_type + static_cast<std::size_t>(stage) * nmb + static_cast<std::size_t>(mb);
  };
  std::vector<int> f(p, 0), b(p, 0), w(p, 0);
  std::vector<Tick> mem(p, 0), e(p, 0), stage_bubble(p, 0);
  std::vector<Tick> t(3 * per_type, 0);
  ManualOrder out;
  out.units.assign(p, {});
  auto max_bubble = [&] { return *std::max_element(stage_bubble.begin(), stage_bubble.end()); };
  auto put = [&](int j, int type) {
    int& counter = type == 0 ? f[j] : type == 1 ? b[j] : w[j];
    const int mb = counter;
    const Tick c = cost[type];
    Tick end = e[j] + c;
    const Tick no_bubble = end;
    if (j > 0 && type == 0) end = std::max(end, t[id(0, j - 1, mb)] + comm + c);
    if (j < p - 1 && type == 1) end = std::max(end, t[id(1, j + 1, mb)] + comm + c);
    if (f[j] > 0) stage_bubble[j] += end - no_bubble;
    e[j] = end;
    t[id(type, j, mb)] = end;
    mem[j] += kMem[type];
    ++counter;
    constexpr UnitKind kKinds[3] = {UnitKind::Forward, UnitKind::BackwardInput, UnitKind::BackwardWeight};
    out.units[j].push_back({kKinds[type], mb, 0});
  };
  // Frees memory with W passes until a unit adding `add` fits; false if none is left.
  auto make_room = [&](int j, Tick add) {
    while (mem[j] + add > max_mem) {
      if (w[j] >= b[j]) return false;
      put(j, 2);
    }
    return true;
  };
  // Fills the wait for `ready` (the input's arrival) with pending W passes.
  auto fill_wait = [&](int j, Tick ready) {
    while (w[j] < b[j] && e[j] + cost_w <= ready) put(j, 2);
    if (w[j] < b[j] && e[j] < ready) {
      if (ready - e[j] <= max_bubble() - stage_bubble[j]) {
        if (no_bubble_greedy) put(j, 2);
      } else {
        put(j, 2);
      }
    }
  };
  for (int i = 0; i < nmb; ++i) {
    std::vector<int> f_required(p, 0);
    if (i == 0) {
      for (int j = 0; j < p; ++j) put(j, 0);
      Tick last_t = 0;
      for (int j = p - 1; j >= 0; --j) {
        if (j == p - 1) {
          last_t = t[id(0, j, i)] + cost_b;
          continue;
        }
        Tick m_j = mem[j], c_j = e[j];
        while (f[j] + f_required[j] < nmb && m_j + kMem[0] <= max_mem) {
          if (allow_bubble_before_first_b ? c_j + cost_f > last_t + comm : c_j >= last_t + comm) break;
          m_j += kMem[0];
          c_j += cost_f;
          ++f_required[j];
        }
        last_t = std::max(c_j, last_t + comm) + cost_b;
      }
      for (int j = 1; j < p; ++j) {
        while (f_required[j] > 0 && f_required[j] >= f_required[j - 1]) --f_required[j];
      }
      for (int j = p - 1; j >= 0; --j) {
        for (int k = 0; k < f_required[j]; ++k) {
          put(j, 0);
        }
        put(j, 1);
      }
      continue;
    }
    for (int j = 0; j < p; ++j) {
      if (f[j] >= nmb) continue;
      if (j + 1 < p && f[j] >= f[j + 1] + 2 && prioritize_b) {
        const Tick next_plus_fw = e[j + 1] + cost_f + cost_b + comm;
        if (e[j] >= next_plus_fw) continue;
        Tick w_cost = 0, mem_with_w = mem[j] + kMem[0];
        for (int k = 0; mem_with_w > max_mem && w[j] + k < b[j]; ++k) {
          w_cost += cost_w;
          mem_with_w += kMem[2];
        }
        if (e[j] + cost_f + w_cost <= next_plus_fw) {
          f_required[j] = 1;
          continue;
        }
        if (next_plus_fw - e[j] <= max_bubble() - stage_bubble[j]) continue;
      }
      f_required[j] = 1;
    }
    for (int j = p - 2; j >= 0; --j) f_required[j] = std::min(f_required[j], f_required[j + 1]);
    for (int j = 0; j < p; ++j) {
      if (f_required[j] == 0) continue;
      if (!make_room(j, kMem[0])) {
        out.feasible = false;
        return out;
      }
      if (j > 0) fill_wait(j, t[id(0, j - 1, f[j])] + comm);
      put(j, 0);
    }
    for (int j = p - 1; j >= 0; --j) {
      if (!make_room(j, kMem[1])) {
        out.feasible = false;
        return out;
      }
      if (j + 1 < p) fill_wait(j, t[id(1, j + 1, i)] + comm);
      if (j == 0 && f[j] == nmb) {
        while (w[j] < b[j]) put(j, 2);
      }
      put(j, 1);
    }
  }
  for (int j = 0; j < p; ++j) {
    while (w[j] < nmb) put(j, 2);
  }
  for (int j = 0; j < p; ++j) out.span = std::max(out.span, t[id(2, j, nmb - 1)] - t[id(0, j, 0)] + cost_f);
  return out;
}

}  // namespace

PipelineSchedule zero_bubble_runtime_schedule(int pp, int m, const PassTimes& times, int max_pending_backward) {
  // The runtime passes each time in milliseconds x 1000, truncated, at least 1
  // (the small term keeps a whole number of microseconds whole in binary).
  auto ticks = [](double seconds) { return std::max<Tick>(static_cast<Tick>(seconds * 1e6 + 1e-6), 1); };
  const Tick cost_f = ticks(times.forward), cost_b = ticks(times.backward_input), cost_w = ticks(times.backward_weight),
             comm = ticks(times.transfer), max_mem = 2L * max_pending_backward;
  ManualOrder best;
  best.feasible = false;
  for (bool allow : {true, false}) {
    for (bool prioritize : {true, false}) {
      for (bool greedy : {true, false}) {
        ManualOrder o = manual_order(pp, m, cost_f, cost_b, cost_w, comm, max_mem, allow, prioritize, greedy);
        if (o.feasible && (!best.feasible || o.span < best.span)) best = std::move(o);
      }
    }
  }
  PipelineSchedule s;
  s.stages = pp;
  s.microbatches = m;
  for (int st = 0; st < pp; ++st) s.chunk_stage.push_back(st);
  if (!best.feasible) return zero_bubble_family(pp, m, 0, 1);  // ZB-H1 fits a limit of p
  s.units = std::move(best.units);
  return s;
}

}  // namespace trainsim
