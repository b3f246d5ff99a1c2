#include "models/schedule.hpp"

#include "models/breadth_first.hpp"
#include "models/deepspeed_schedule.hpp"
#include "models/v_schedules.hpp"
#include "models/zero_bubble.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>

namespace trainsim {

namespace {

// Megatron-LM's interleaved ordering: micro-batches go in groups of pp through
// chunk 0, then the same group through chunk 1, ...; backward walks chunks in reverse.
ScheduleUnit interleaved_unit(int k, bool forward, int pp, int vpp) {
  const int group = k / (pp * vpp);
  const int within = k % (pp * vpp);
  int chunk = within / pp;
  if (!forward) chunk = vpp - 1 - chunk;
  return ScheduleUnit{forward ? UnitKind::Forward : UnitKind::Backward, group * pp + within % pp, chunk};
}

int warmup_units(ScheduleKind kind, int stage, int pp, int m, int vpp) {
  switch (kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::ZeroBubbleH1:
    case ScheduleKind::ZeroBubbleH2:
    case ScheduleKind::ZeroBubble1p:
    case ScheduleKind::ZeroBubble2p:
    case ScheduleKind::Custom:
    case ScheduleKind::ZeroBubbleV:
    case ScheduleKind::DualPipeV:
    case ScheduleKind::DualPipe:
    case ScheduleKind::Seq1F1B:
    case ScheduleKind::BreadthFirst:
      return m;
    case ScheduleKind::OneFOneB:
    case ScheduleKind::DeepSpeed1F1B:  // the same units (models/deepspeed_schedule.hpp)
    case ScheduleKind::DeepSpeed1F1BLegacy:
    case ScheduleKind::PipeDream:  // PipeDream's steady state is 1F1B's, never flushed
    case ScheduleKind::PipeDream2BW:
      return std::min(pp - stage - 1, m);
    case ScheduleKind::Interleaved1F1B:
      return std::min((pp - stage - 1) * 2 + (vpp - 1) * pp, m * vpp);
  }
  return m;
}

std::vector<ScheduleUnit> builtin_order(ScheduleKind kind, int stage, int pp, int m, int vpp) {
  std::vector<ScheduleUnit> order;
  const bool interleaved = kind == ScheduleKind::Interleaved1F1B;
  const int units = interleaved ? m * vpp : m;
  order.reserve(2 * static_cast<std::size_t>(units));
  auto unit = [&](int k, bool forward) {
    return interleaved ? interleaved_unit(k, forward, pp, vpp)
                       : ScheduleUnit{forward ? UnitKind::Forward : UnitKind::Backward, k, 0};
  };
  const int warmup = warmup_units(kind, stage, pp, m, vpp);
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back(unit(f, true));
  while (f < units) {
    order.push_back(unit(f++, true));
    order.push_back(unit(b++, false));
  }
  while (b < units) order.push_back(unit(b++, false));
  return order;
}

const char* kind_letter(UnitKind k) {
  switch (k) {
    case UnitKind::Forward:
      return "F";
    case UnitKind::Backward:
      return "BW";
    case UnitKind::BackwardInput:
      return "B";
    case UnitKind::BackwardWeight:
      return "W";
  }
  return "?";
}

}  // namespace

std::string to_string(const ScheduleUnit& u) {
  std::string s = (u.overlapped ? "+" : "") + (kind_letter(u.kind) + std::to_string(u.microbatch));
  if (u.chunk > 0) s += "." + std::to_string(u.chunk);
  return s;
}

PipelineSchedule zero_bubble_family(int pp, int m, int extra_warmup, int deferral_per_rank) {
  PipelineSchedule s;
  s.stages = pp;
  s.microbatches = m;
  for (int st = 0; st < pp; ++st) {
    s.chunk_stage.push_back(st);
    std::vector<ScheduleUnit> order;
    order.reserve(3 * static_cast<std::size_t>(m));
    const int deferred = deferral_per_rank * st;  // W passes this rank may keep pending
    int f = 0, b = 0, w = 0;
    auto F = [&] { order.push_back({UnitKind::Forward, f++, 0}); };
    auto B = [&] { order.push_back({UnitKind::BackwardInput, b++, 0}); };
    auto W = [&] { order.push_back({UnitKind::BackwardWeight, w++, 0}); };
    const int warmup = std::min(m, pp - st + std::min(extra_warmup, pp - 1 - st));
    while (f < warmup) F();
    while (b < m) {
      B();
      if (f < m) {
        if (b - w > deferred) W();
        F();
      } else {
        W();
      }
    }
    while (w < m) W();
    s.units.push_back(std::move(order));
  }
  return s;
}

PipelineSchedule seq1f1b_schedule(int pp, int m, int k) {
  PipelineSchedule s;
  s.name = to_string(ScheduleKind::Seq1F1B);
  s.stages = pp;
  s.microbatches = m * k;
  const int units = m * k;
  // The n-th backward of a rank: micro-batch n / k, its chunks in reverse.
  auto backward = [k](int n) { return ScheduleUnit{UnitKind::Backward, n / k * k + (k - 1 - n % k), 0}; };
  for (int st = 0; st < pp; ++st) {
    s.chunk_stage.push_back(st);
    std::vector<ScheduleUnit> order;
    order.reserve(2 * static_cast<std::size_t>(units));
    const int warmup = std::min(units, pp - 1 - st + k - 1);
    int f = 0, b = 0;
    for (; f < warmup; ++f) order.push_back({UnitKind::Forward, f, 0});
    while (f < units) {
      order.push_back({UnitKind::Forward, f++, 0});
      order.push_back(backward(b++));
    }
    while (b < units) order.push_back(backward(b++));
    s.units.push_back(std::move(order));
  }
  return s;
}

PipelineSchedule builtin_schedule(ScheduleKind kind, int pp, int m, int vpp) {
  if (kind == ScheduleKind::Seq1F1B) return seq1f1b_schedule(pp, m, 1);  // one chunk: 1F1B
  if (kind == ScheduleKind::ZeroBubbleH1 || kind == ScheduleKind::ZeroBubbleH2) {
    // ZB-H1: 1F1B's warmup, rank i keeps i W pending; ZB-H2: p-1 more forwards
    // on rank 0 (2p-1 in flight), rank i keeps 2i W pending (the paper's
    // parallelogram: rank 0 ends first).
    PipelineSchedule s =
        kind == ScheduleKind::ZeroBubbleH1 ? zero_bubble_family(pp, m, 0, 1) : zero_bubble_family(pp, m, pp - 1, 2);
    s.name = to_string(kind);
    return s;
  }
  if (kind == ScheduleKind::ZeroBubble1p || kind == ScheduleKind::ZeroBubble2p) {
    // Without the cost model's pass times (the planner has them,
    // models/zero_bubble.hpp): equal times, W inputs counted as whole activations.
    PipelineSchedule s =
        zero_bubble_auto_schedule(pp, m, PassTimes{}, kind == ScheduleKind::ZeroBubble1p ? pp : 2.0 * pp, 1.0);
    s.name = to_string(kind);
    return s;
  }
  if (kind == ScheduleKind::BreadthFirst) return breadth_first_schedule(pp, m, vpp);
  if (is_deepspeed_schedule(kind)) return deepspeed_schedule(kind, pp, m);
  if (kind == ScheduleKind::DualPipe) return dualpipe_schedule(pp, m);
  if (kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::DualPipeV) {
    // Without the cost model's pass times: equal times, W inputs counted as
    // whole activations, ZB-V under 1F1B's peak (2p chunk activations).
    return kind == ScheduleKind::ZeroBubbleV ? zero_bubble_v_schedule(pp, m, PassTimes{}, 2.0 * pp, 1.0)
                                             : dualpipe_v_schedule(pp, m);
  }
  PipelineSchedule s;
  s.name = to_string(kind);
  s.stages = pp;
  s.microbatches = m;
  const int chunks = kind == ScheduleKind::Interleaved1F1B ? vpp : 1;
  for (int v = 0; v < pp * chunks; ++v) s.chunk_stage.push_back(v % pp);
  for (int st = 0; st < pp; ++st) s.units.push_back(builtin_order(kind, st, pp, m, chunks));
  return s;
}

std::vector<BatchedExchange> megatron_batched_exchanges(int pp, int stage, int vpp, int m) {
  const int total = m * vpp;
  const bool first = stage == 0, last = stage == pp - 1;
  // get_model_chunk_id: Python's modulo, so a negative index wraps.
  const int group = pp * vpp;
  auto chunk_id = [&](int k, bool forward) {
    const int c = ((k % group) + group) % group / pp;
    return forward ? c : vpp - c - 1;
  };
  const int warmup = warmup_units(ScheduleKind::Interleaved1F1B, stage, pp, m, vpp);
  const int remaining = total - warmup;
  std::vector<BatchedExchange> ex(2 * static_cast<std::size_t>(total));
  for (int k = 0; k < warmup; ++k) {  // unit k: forward k
    BatchedExchange& e = ex[static_cast<std::size_t>(k)];
    e.after = true;
    e.recv_forward = k != total - 1 && !(first && chunk_id(k + 1, true) == 0);
    // The first backward's input: with the last warm-up forward, or before the
    // cool-down (recv_backward) when every forward comes first.
    e.recv_backward = k == warmup - 1 && !last;
  }
  for (int k = 0; k < remaining; ++k) {  // unit warmup + 2k + 1: backward k of the steady phase
    BatchedExchange& e = ex[static_cast<std::size_t>(warmup + 2 * k + 1)];
    e.after = true;
    // The first rank runs p-1 forwards ahead of the last, which sends it the wrap-around inputs.
    e.recv_forward = k != remaining - 1 && !(first && chunk_id(k + warmup - (pp - 1), true) == vpp - 1);
    e.recv_backward = !(last && chunk_id(k - (pp - 1), false) == 0);
  }
  for (int k = remaining; k < total; ++k) {  // unit total + k: backward k of the cool-down
    BatchedExchange& e = ex[static_cast<std::size_t>(total + k)];
    e.after = true;
    e.recv_backward = k != total - 1 && !(last && chunk_id(k + 1, false) == vpp - 1);
  }
  return ex;
}

PipelineSchedule schedule_of(const ParallelSpec& par) {
  if (par.schedule == ScheduleKind::Custom) {
    PipelineSchedule s = par.custom_schedule;
    s.microbatches = par.micro_batches();
    return s;
  }
  PipelineSchedule s = par.schedule == ScheduleKind::Seq1F1B
                           ? seq1f1b_schedule(par.pp, par.micro_batches(), par.seq_chunks)
                           : builtin_schedule(par.schedule, par.pp, par.micro_batches(), par.vpp);
  if (par.moe_a2a_overlap) overlap_backward_with_next_forward(s);
  return s;
}

void overlap_backward_with_next_forward(PipelineSchedule& s) {
  for (auto& units : s.units) {
    for (std::size_t i = 1; i < units.size(); ++i) {
      const ScheduleUnit& before = units[i - 1];
      const bool backward = before.kind == UnitKind::Backward || before.kind == UnitKind::BackwardInput;
      if (units[i].kind == UnitKind::Forward && backward && !before.overlapped &&
          before.microbatch != units[i].microbatch)
        units[i].overlapped = true;
    }
  }
}

std::vector<std::string> check_schedule(const PipelineSchedule& s) {
  constexpr std::size_t kMaxProblems = 20;  // beyond these, one line says how many more
  std::vector<std::string> problems;
  const int V = s.chunks();
  if (s.stages < 1 || static_cast<int>(s.units.size()) != s.stages) {
    problems.push_back("expected a unit list for each of the " + std::to_string(s.stages) + " pipeline ranks, got " +
                       std::to_string(s.units.size()));
    return problems;
  }
  for (int v = 0; v < V; ++v) {
    if (s.chunk_stage[v] < 0 || s.chunk_stage[v] >= s.stages) {
      problems.push_back("chunk " + std::to_string(v) + " is mapped to pipeline rank " +
                         std::to_string(s.chunk_stage[v]) + ", expected 0.." + std::to_string(s.stages - 1));
    }
  }
  if (!problems.empty()) return problems;
  for (int st = 0; st < s.stages; ++st) {
    if (s.chunks_on(st) == 0) problems.push_back("pipeline rank " + std::to_string(st) + " holds no chunk");
  }
  if (!problems.empty()) return problems;

  // Each rank runs m forwards per chunk it holds (counted first, so that the
  // detailed check below allocates no more than the units given).
  const int m = s.microbatches;
  for (int st = 0; st < s.stages; ++st) {
    std::int64_t forwards = 0;
    for (const ScheduleUnit& u : s.units[st]) forwards += u.kind == UnitKind::Forward ? 1 : 0;
    const std::int64_t expected = static_cast<std::int64_t>(m) * s.chunks_on(st);
    if (forwards != expected) {
      problems.push_back("pipeline rank " + std::to_string(st) + " has " + std::to_string(forwards) +
                         " forward units, expected one per micro-batch and chunk (" + std::to_string(m) + " x " +
                         std::to_string(s.chunks_on(st)) + " = " + std::to_string(expected) + ")");
    }
  }
  if (!problems.empty()) return problems;

  // Shape and per-rank order: each (micro-batch, chunk) once forward, once
  // backward (whole, or B then W), F before its backward.
  enum : int { kF, kB, kW, kKinds };
  for (int st = 0; st < s.stages; ++st) {
    const int chunks = s.chunks_on(st);
    std::vector<int> seen(static_cast<std::size_t>(m) * chunks * kKinds, -1);
    const std::string rank = "pipeline rank " + std::to_string(st);
    auto at = [&](int mb, int c, int k) -> int& {
      return seen[(static_cast<std::size_t>(mb) * chunks + c) * kKinds + k];
    };
    const auto& units = s.units[st];
    for (int i = 0; i < static_cast<int>(units.size()); ++i) {
      const ScheduleUnit& u = units[i];
      // Built only for a problem: the check runs on every plan.
      auto where = [&] { return rank + ", unit " + std::to_string(i) + " (" + to_string(u) + ")"; };
      if (u.microbatch < 0 || u.microbatch >= m || u.chunk < 0 || u.chunk >= chunks) {
        problems.push_back(where() + ": expected micro-batch 0.." + std::to_string(m - 1) + " and chunk 0.." +
                           std::to_string(chunks - 1));
        continue;
      }
      auto mark = [&](int k) {
        if (at(u.microbatch, u.chunk, k) >= 0) problems.push_back(where() + ": appears twice");
        at(u.microbatch, u.chunk, k) = i;
      };
      switch (u.kind) {
        case UnitKind::Forward:
          mark(kF);
          break;
        case UnitKind::Backward:
          mark(kB);
          mark(kW);
          break;
        case UnitKind::BackwardInput:
          mark(kB);
          break;
        case UnitKind::BackwardWeight:
          mark(kW);
          if (at(u.microbatch, u.chunk, kB) < 0) problems.push_back(where() + ": W before the B it belongs to");
          break;
      }
      if (u.kind != UnitKind::Forward && at(u.microbatch, u.chunk, kF) < 0)
        problems.push_back(where() + ": backward before the forward of the same micro-batch and chunk");
      if (u.overlapped) {
        if (i == 0 || units[i - 1].overlapped) {
          problems.push_back(where() +
                             ": overlapped units come in pairs: expected a unit before it that is not "
                             "overlapped itself");
        } else if (units[i - 1].microbatch == u.microbatch) {
          problems.push_back(where() + ": overlapped with " + to_string(units[i - 1]) +
                             " of the same micro-batch, which it depends on; expected another micro-batch");
        }
      }
    }
    for (int mb = 0; mb < m; ++mb) {
      for (int c = 0; c < chunks; ++c) {
        const ScheduleUnit f{UnitKind::Forward, mb, c};
        if (at(mb, c, kF) < 0) problems.push_back(rank + ": " + to_string(f) + " is missing");
        if (at(mb, c, kB) < 0)
          problems.push_back(rank + ": the backward (B or BW) of micro-batch " + std::to_string(mb) + ", chunk " +
                             std::to_string(c) + " is missing");
        if (at(mb, c, kW) < 0 && at(mb, c, kB) >= 0)
          problems.push_back(rank + ": W" + std::to_string(mb) + (c > 0 ? "." + std::to_string(c) : "") +
                             " is missing");
      }
    }
  }
  if (problems.size() > kMaxProblems) {
    const std::size_t more = problems.size() - kMaxProblems;
    problems.resize(kMaxProblems);
    problems.push_back("... and " + std::to_string(more) + " more problems of the same kind");
  }
  if (!problems.empty()) return problems;

  // The two units of an overlapped pair run interleaved, so their messages may
  // leave in either order: they must not share a link.
  for (int st = 0; st < s.stages; ++st) {
    const auto& units = s.units[st];
    // The peer rank a unit receives from and sends to over the pipeline (-1: none).
    auto peers = [&](const ScheduleUnit& u) {
      std::pair<int, int> out{-1, -1};
      if (u.kind == UnitKind::BackwardWeight) return out;
      const int v = s.virtual_stage(st, u.chunk);
      const bool fwd = u.kind == UnitKind::Forward;
      const int from_v = fwd ? s.prev_chunk(v) : s.next_chunk(v), to_v = fwd ? s.next_chunk(v) : s.prev_chunk(v);
      if (from_v >= 0 && s.chunk_stage[from_v] != st) out.first = s.chunk_stage[from_v];
      if (to_v >= 0 && s.chunk_stage[to_v] != st) out.second = s.chunk_stage[to_v];
      return out;
    };
    for (std::size_t i = 1; i < units.size(); ++i) {
      if (!units[i].overlapped) continue;
      const bool same_direction = (units[i].kind == UnitKind::Forward) == (units[i - 1].kind == UnitKind::Forward);
      if (!same_direction) continue;
      const auto a = peers(units[i - 1]), b = peers(units[i]);
      if ((a.first >= 0 && a.first == b.first) || (a.second >= 0 && a.second == b.second)) {
        problems.push_back("pipeline rank " + std::to_string(st) + ", unit " + std::to_string(i) + " (" +
                           to_string(units[i]) + "): overlapped with " + to_string(units[i - 1]) +
                           ", which exchanges messages with the same rank in the same direction; expected units "
                           "whose messages use different links");
      }
    }
  }
  if (!problems.empty()) return problems;

  // Messages on each link (sender rank, receiver rank, direction) must be
  // received in the order they are sent: a link is a FIFO.
  std::map<std::tuple<int, int, int>, std::vector<std::pair<int, int>>> sent, received;
  for (int st = 0; st < s.stages; ++st) {
    for (const ScheduleUnit& u : s.units[st]) {
      if (u.kind == UnitKind::BackwardWeight) continue;
      const int v = s.virtual_stage(st, u.chunk);
      const bool fwd = u.kind == UnitKind::Forward;
      const int from_v = fwd ? s.prev_chunk(v) : s.next_chunk(v);  // whose output this unit consumes
      const int to_v = fwd ? s.next_chunk(v) : s.prev_chunk(v);    // who consumes this unit's output
      if (from_v >= 0 && s.chunk_stage[from_v] != st)
        received[{s.chunk_stage[from_v], st, fwd ? 0 : 1}].emplace_back(u.microbatch, from_v);
      if (to_v >= 0 && s.chunk_stage[to_v] != st)
        sent[{st, s.chunk_stage[to_v], fwd ? 0 : 1}].emplace_back(u.microbatch, v);
    }
  }
  // Each link of a rank gets a stream of its own (models/planner.cpp).
  constexpr int kMaxLinksPerRank = 64;
  std::vector<int> links_of(s.stages, 0);
  for (const auto& [link, order] : sent) {
    ++links_of[std::get<0>(link)];
    ++links_of[std::get<1>(link)];
  }
  for (int st = 0; st < s.stages; ++st) {
    if (links_of[st] > kMaxLinksPerRank)
      problems.push_back("pipeline rank " + std::to_string(st) + " exchanges messages over " +
                         std::to_string(links_of[st]) + " links (peers x direction), at most " +
                         std::to_string(kMaxLinksPerRank) + " are supported");
  }
  if (!problems.empty()) return problems;
  for (const auto& [link, order] : sent) {
    const auto& recv = received[link];
    for (std::size_t i = 0; i < order.size() && i < recv.size(); ++i) {
      if (order[i] == recv[i]) continue;
      const auto [from, to, dir] = link;
      problems.push_back("pipeline rank " + std::to_string(to) + " receives " +
                         (dir == 0 ? "activations" : "gradients") + " from rank " + std::to_string(from) +
                         " in another order than they are sent: message " + std::to_string(i) +
                         " is sent for micro-batch " + std::to_string(order[i].first) + " of chunk " +
                         std::to_string(order[i].second) + " but expected for micro-batch " +
                         std::to_string(recv[i].first) + " of chunk " + std::to_string(recv[i].second));
      break;
    }
  }
  if (!problems.empty()) return problems;

  // Abstract execution: each rank runs its units in order once their inputs
  // exist (F needs the previous chunk's F; B the next chunk's B; W its B).
  std::vector<std::vector<char>> fdone(V, std::vector<char>(m, 0)), bdone(V, std::vector<char>(m, 0));
  // An overlapped pair starts once the inputs of both its units exist.
  std::vector<std::size_t> pos(s.stages, 0);
  auto ready = [&](int st, const ScheduleUnit& u) {
    const int v = s.virtual_stage(st, u.chunk);
    if (u.kind == UnitKind::Forward) return s.prev_chunk(v) < 0 || fdone[s.prev_chunk(v)][u.microbatch] != 0;
    if (u.kind == UnitKind::BackwardWeight) return true;
    return s.next_chunk(v) < 0 || bdone[s.next_chunk(v)][u.microbatch] != 0;
  };
  auto run = [&](int st, const ScheduleUnit& u) {
    const int v = s.virtual_stage(st, u.chunk);
    if (u.kind == UnitKind::Forward) fdone[v][u.microbatch] = 1;
    if (u.kind == UnitKind::Backward || u.kind == UnitKind::BackwardInput) bdone[v][u.microbatch] = 1;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < s.stages; ++st) {
      const auto& units = s.units[st];
      while (pos[st] < units.size()) {
        const std::size_t n = pos[st] + 1 < units.size() && units[pos[st] + 1].overlapped ? 2 : 1;
        if (!ready(st, units[pos[st]]) || (n == 2 && !ready(st, units[pos[st] + 1]))) break;
        for (std::size_t k = 0; k < n; ++k) run(st, units[pos[st] + k]);
        pos[st] += n;
        progress = true;
      }
    }
  }
  for (int st = 0; st < s.stages; ++st) {
    if (pos[st] < s.units[st].size()) {
      problems.push_back("deadlock: pipeline rank " + std::to_string(st) + " waits forever at unit " +
                         std::to_string(pos[st]) + " (" + to_string(s.units[st][pos[st]]) +
                         "): its input is produced after a unit that waits for it");
    }
  }
  return problems;
}

double peak_activation_bytes(const PipelineSchedule& s, int stage,
                             const std::function<ChunkActivation(int chunk)>& bytes_of_chunk) {
  std::vector<ChunkActivation> per_chunk;
  for (int c = 0; c < s.chunks_on(stage); ++c) per_chunk.push_back(bytes_of_chunk(c));
  double live = 0, peak = 0;
  for (const ScheduleUnit& u : s.units[stage]) {
    const ChunkActivation& a = per_chunk[u.chunk];
    switch (u.kind) {
      case UnitKind::Forward:
        live += a.total;
        peak = std::max(peak, live);
        break;
      case UnitKind::Backward:
        live -= a.total;
        break;
      case UnitKind::BackwardInput:
        live += a.after_input - a.total;
        peak = std::max(peak, live);
        break;
      case UnitKind::BackwardWeight:
        live -= a.after_input;
        break;
    }
  }
  return peak;
}

}  // namespace trainsim
