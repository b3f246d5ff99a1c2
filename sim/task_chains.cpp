#include "sim/task_chains.hpp"

#include <algorithm>

namespace trainsim {

namespace {

// The chain rules of sim/task_chains.hpp over one region of a program: runs
// start at the region's chainable tasks in task order and grow only into the
// region. `Rules` says what the region is:
//   bool member(u)  -- u may join a run of this region;
//   bool exit(t)    -- t leads out of the region (a run ends at it);
//   std::uint8_t& state(u) -- u's state byte (u in the region or the sentinel);
//   bool known(d)   -- d's state byte is the region's (else d counts as not done
//                      unless it comes before the run's first task).
template <class Rules>
void find_in_region(const ProgramTemplate& p, std::span<const std::uint8_t> linkable_slot,
                    std::span<const std::uint32_t> stream_index, std::uint32_t begin, std::uint32_t end, Rules& rules,
                    std::vector<std::uint32_t>& run, TaskChains& out) {
  constexpr std::uint8_t kFree = 0, kInRun = 1, kChained = 2;
  const auto n = static_cast<std::uint32_t>(p.tasks.size());
  auto chainable = [&](std::uint32_t t) {
    const Task& task = p.tasks[t];
    return task.kind == TaskKind::Compute || (task.kind == TaskKind::Collective && linkable_slot[task.ref]);
  };
  // The tasks before and after one on its stream: kNoChain after the last;
  // before the first `n`, a task that counts as done.
  auto next_on_stream = [&](std::uint32_t t) {
    const std::uint32_t g = stream_index[t] + 1;
    const std::uint8_t s = p.tasks[t].stream;
    return g < p.stream_offsets[s + 1] ? p.stream_tasks[g] : kNoChain;
  };
  auto prev_on_stream = [&](std::uint32_t t) {
    const std::uint32_t g = stream_index[t];
    return g > p.stream_offsets[p.tasks[t].stream] ? p.stream_tasks[g - 1] : n;
  };
  for (std::uint32_t first = begin; first < end; ++first) {
    if (!rules.member(first) || rules.state(first) == kChained || !chainable(first)) continue;
    run.assign(1, first);
    rules.state(first) = kInRun;
    // Grow the run while exactly one task becomes ready when its last task
    // ends: a dependent of it or the next task on its stream, whose
    // dependencies and stream predecessor are done. Tasks from before the run
    // (created earlier or in an earlier chain) count as done: the executor
    // checks that they are when the run starts.
    auto done = [&](std::uint32_t d) { return d < first || (rules.known(d) && rules.state(d) != kFree); };
    auto ready = [&](std::uint32_t u) {
      if ((rules.known(u) && rules.state(u) == kInRun) || !done(prev_on_stream(u))) return false;
      for (const std::uint32_t d : p.deps_of(u))
        if (!done(d)) return false;
      return true;
    };
    for (;;) {
      const std::uint32_t t = run.back();
      if (rules.exit(t)) break;
      std::uint32_t next = kNoChain, count = 0;
      // A second ready task ends the run: the rest need not be looked at.
      for (const std::uint32_t u : p.succs_of(t)) {
        if (ready(u)) {
          next = u;
          if (++count > 1) break;
        }
      }
      const std::uint32_t after = next_on_stream(t);
      if (count < 2 && after != kNoChain && after != next && ready(after)) {
        next = after;
        ++count;
      }
      if (count != 1 || !rules.member(next) || rules.state(next) == kChained || !chainable(next)) break;
      rules.state(next) = kInRun;
      run.push_back(next);
    }
    // Every task but the last must lead only to later tasks of the run, by its
    // dependents and on its stream: cut the run after the first that does not.
    // (Those it leads to past the cut wait for the cut's last task, directly
    // or on their stream: they cannot start before the chain ends.)
    std::size_t length = run.size();
    for (std::size_t i = 0; i + 1 < run.size(); ++i) {
      bool inside = true;
      for (const std::uint32_t s : p.succs_of(run[i])) inside &= rules.member(s) && rules.state(s) == kInRun;
      const std::uint32_t after = next_on_stream(run[i]);
      inside &= after == kNoChain || (rules.member(after) && rules.state(after) == kInRun);
      if (!inside) {
        length = i + 1;
        break;
      }
    }
    if (length < 2) {
      for (const std::uint32_t t : run) rules.state(t) = kFree;
      continue;
    }
    for (std::size_t i = length; i < run.size(); ++i) rules.state(run[i]) = kFree;
    const auto c = static_cast<std::uint32_t>(out.size());
    for (std::size_t i = 0; i < length; ++i) {
      rules.state(run[i]) = kChained;
      out.at[run[i]] = ChainPosition{c, static_cast<std::uint32_t>(i)};
      out.tasks.push_back(run[i]);
    }
    out.offsets.push_back(static_cast<std::uint32_t>(out.tasks.size()));
  }
}

// The whole program as one region (no marked passes to cut at).
struct WholeProgram {
  std::vector<std::uint8_t> states;
  bool member(std::uint32_t) const { return true; }
  bool exit(std::uint32_t) const { return false; }
  bool known(std::uint32_t) const { return true; }
  std::uint8_t& state(std::uint32_t u) { return states[u]; }
};

// The tasks outside marked passes: a pass's tasks never join their runs, and
// count as done only when they come before a run's first task.
struct OutsidePasses {
  const std::vector<std::uint32_t>* pass_of;
  std::vector<std::uint8_t> states;
  bool member(std::uint32_t u) const { return u < pass_of->size() && (*pass_of)[u] == kNoChain; }
  bool exit(std::uint32_t) const { return false; }
  bool known(std::uint32_t) const { return true; }  // a pass's tasks stay free here
  std::uint8_t& state(std::uint32_t u) { return states[u]; }
};

// One marked pass [first, end): a run ends at a task that leads out of it (a
// dependent or the next task on its stream outside the pass), so what lies
// outside is never looked at and the pass's chains depend on the pass alone.
struct InsidePass {
  const ProgramTemplate* p;
  std::span<const std::uint32_t> stream_index;
  std::uint32_t first, end;
  std::vector<std::uint8_t>* states;  // per task of the pass, then the sentinel
  bool member(std::uint32_t u) const { return u >= first && u < end; }
  bool known(std::uint32_t u) const { return member(u) || u == p->tasks.size(); }
  std::uint8_t& state(std::uint32_t u) { return (*states)[member(u) ? u - first : end - first]; }
  bool exit(std::uint32_t t) const {
    for (const std::uint32_t s : p->succs_of(t))
      if (s >= end) return true;
    const std::uint32_t g = stream_index[t] + 1;
    const std::uint8_t st = p->tasks[t].stream;
    return g < p->stream_offsets[st + 1] && !member(p->stream_tasks[g]);
  }
};

}  // namespace

TaskChains find_task_chains(const ProgramTemplate& p, std::span<const std::uint8_t> linkable_slot, bool cut_at_passes) {
  const auto n = static_cast<std::uint32_t>(p.tasks.size());
  TaskChains out;
  out.at.assign(n, ChainPosition{});
  out.offsets.push_back(0);
  if (p.stream_index.size() == n && p.stream_tasks.size() == n) {
    out.stream_index = p.stream_index;  // laid out with the streams (ProgramBuilder::finish)
    out.streams_in_task_order = p.streams_in_task_order;
  } else {
    out.stream_index.resize(n);
    for (std::size_t s = 0; s + 1 < p.stream_offsets.size(); ++s) {
      for (std::uint32_t g = p.stream_offsets[s]; g < p.stream_offsets[s + 1]; ++g) {
        out.stream_index[p.stream_tasks[g]] = g;
        if (g > p.stream_offsets[s] && p.stream_tasks[g] < p.stream_tasks[g - 1]) out.streams_in_task_order = false;
      }
    }
  }
  std::vector<std::uint32_t> run;
  if (!cut_at_passes || p.passes.empty()) {
    WholeProgram rules{std::vector<std::uint8_t>(n + 1, 0)};
    rules.states[n] = 2;  // the sentinel before a stream's first task: done
    find_in_region(p, linkable_slot, out.stream_index, 0, n, rules, run, out);
    return out;
  }
  out.pass_of.assign(n, kNoChain);
  for (std::uint32_t i = 0; i < p.passes.size(); ++i) {
    const PassMark& m = p.passes[i];
    const std::uint32_t from = std::min(m.first, n), to = std::min(m.first + m.count, n);
    std::fill(out.pass_of.begin() + from, out.pass_of.begin() + to, i);
  }
  out.pass_found.assign(p.passes.size(), 0);
  OutsidePasses rules{&out.pass_of, std::vector<std::uint8_t>(n + 1, 0)};
  rules.states[n] = 2;
  // The gaps between passes, in task order.
  std::uint32_t from = 0;
  for (const PassMark& m : p.passes) {
    find_in_region(p, linkable_slot, out.stream_index, from, std::min(m.first, n), rules, run, out);
    from = std::min(m.first + m.count, n);
  }
  find_in_region(p, linkable_slot, out.stream_index, from, n, rules, run, out);
  return out;
}

namespace {
// What a marked pass's chains depend on besides the fields and inner
// dependencies its key fixes (ProgramTemplate::passes): per task whether it
// leads out of the pass, and its neighbours on its stream inside the pass (or
// where they lie outside it).
void pass_shape(const ProgramTemplate& p, std::span<const std::uint32_t> stream_index, std::uint32_t first,
                std::uint32_t end, std::vector<std::int32_t>& shape) {
  shape.clear();
  shape.reserve(3 * static_cast<std::size_t>(end - first));  // one allocation, not one per doubling
  for (std::uint32_t t = first; t < end; ++t) {
    bool exit = false;
    for (const std::uint32_t s : p.succs_of(t)) exit |= s >= end;
    const std::uint32_t g = stream_index[t];
    const std::uint8_t st = p.tasks[t].stream;
    std::int32_t next = -1, prev = -1;  // none, or before the pass (done)
    if (g + 1 < p.stream_offsets[st + 1]) {
      const std::uint32_t u = p.stream_tasks[g + 1];
      if (u >= first && u < end) {
        next = static_cast<std::int32_t>(u - first);
      } else {
        exit = true;
      }
    }
    if (g > p.stream_offsets[st]) {
      const std::uint32_t u = p.stream_tasks[g - 1];
      prev = u >= end ? -2 : u >= first ? static_cast<std::int32_t>(u - first) : -1;
    }
    shape.push_back(exit ? 1 : 0);
    shape.push_back(next);
    shape.push_back(prev);
  }
}
}  // namespace

void find_pass_chains(const ProgramTemplate& p, std::span<const std::uint8_t> linkable_slot, std::uint32_t pass,
                      TaskChains& chains, bool reuse) {
  if (chains.pass_found[pass]) return;
  chains.pass_found[pass] = 1;
  const PassMark& m = p.passes[pass];
  const auto n = static_cast<std::uint32_t>(p.tasks.size());
  const std::uint32_t end = std::min(m.first + m.count, n);
  std::vector<std::int32_t>& shape = chains.shape_scratch;
  if (reuse) {
    pass_shape(p, chains.stream_index, m.first, end, shape);
    for (const TaskChains::PassChains& pc : chains.pass_chains) {
      if (pc.key != m.key || pc.count != end - m.first || pc.shape != shape) continue;
      // The same pass, shifted: its chains, each task moved by the passes' distance.
      for (std::uint32_t c = pc.first_chain; c < pc.first_chain + pc.chains; ++c) {
        const auto id = static_cast<std::uint32_t>(chains.size());
        const std::uint32_t from = chains.offsets[c], to = chains.offsets[c + 1];
        for (std::uint32_t i = from; i < to; ++i) {
          const std::uint32_t t = chains.tasks[i] - pc.first + m.first;
          chains.at[t] = ChainPosition{id, i - from};
          chains.tasks.push_back(t);
        }
        chains.offsets.push_back(static_cast<std::uint32_t>(chains.tasks.size()));
      }
      ++chains.reused_passes;
      return;
    }
  }
  const auto before = static_cast<std::uint32_t>(chains.size());
  std::vector<std::uint8_t>& states = chains.states_scratch;
  states.assign(end - m.first + 1, 0);
  states.back() = 2;  // the sentinel
  InsidePass rules{&p, chains.stream_index, m.first, end, &states};
  find_in_region(p, linkable_slot, chains.stream_index, m.first, end, rules, chains.run_scratch, chains);
  if (reuse && chains.pass_chains.size() < kMaxPassShapes) {
    chains.pass_chains.push_back(TaskChains::PassChains{m.key, m.first, end - m.first, before,
                                                        static_cast<std::uint32_t>(chains.size()) - before, shape});
  }
}

}  // namespace trainsim
