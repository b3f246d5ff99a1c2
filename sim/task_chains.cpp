#include "sim/task_chains.hpp"

namespace trainsim {

TaskChains find_task_chains(const ProgramTemplate& p, std::span<const std::uint8_t> linkable_slot, bool cut_at_passes) {
  const auto n = static_cast<std::uint32_t>(p.tasks.size());
  TaskChains out;
  out.at.assign(n, ChainPosition{});
  out.offsets.push_back(0);
  // The tasks before and after each one on its stream: kNoChain after the
  // last; before the first `n`, a task that counts as done (state below).
  std::vector<std::uint32_t> next_on_stream(n, kNoChain), prev_on_stream(n, n);
  for (std::uint32_t s = 0; s < p.streams.size(); ++s) {
    const auto on_stream = p.stream(s);
    for (std::size_t i = 1; i < on_stream.size(); ++i) {
      next_on_stream[on_stream[i - 1]] = on_stream[i];
      prev_on_stream[on_stream[i]] = on_stream[i - 1];
    }
  }
  auto chainable = [&](std::uint32_t t) {
    const Task& task = p.tasks[t];
    return task.kind == TaskKind::Compute || (task.kind == TaskKind::Collective && linkable_slot[task.ref]);
  };
  // Per task, one byte read where the rules below ask "in the run being built"
  // or "in an earlier chain".
  constexpr std::uint8_t kFree = 0, kInRun = 1, kChained = 2;
  std::vector<std::uint8_t> state(n + 1, kFree);
  state[n] = kChained;
  std::vector<std::uint8_t> pass_start;
  if (cut_at_passes && !p.passes.empty()) {
    pass_start.assign(n, 0);
    for (const PassMark& m : p.passes) pass_start[m.first] = 1;
  }
  std::vector<std::uint32_t> run;
  for (std::uint32_t first = 0; first < n; ++first) {
    if (state[first] == kChained || !chainable(first)) continue;
    run.assign(1, first);
    state[first] = kInRun;
    // Grow the run while exactly one task becomes ready when its last task
    // ends: a dependent of it or the next task on its stream, whose
    // dependencies and stream predecessor are done. Tasks from before the run
    // (created earlier or in an earlier chain) count as done: the executor
    // checks that they are when the run starts.
    auto done = [&](std::uint32_t d) { return d < first || state[d] != kFree; };
    auto ready = [&](std::uint32_t u) {
      if (state[u] == kInRun || !done(prev_on_stream[u])) return false;
      for (const std::uint32_t d : p.deps_of(u))
        if (!done(d)) return false;
      return true;
    };
    for (;;) {
      const std::uint32_t t = run.back();
      std::uint32_t next = kNoChain, count = 0;
      // A second ready task ends the run: the rest need not be looked at.
      for (const std::uint32_t u : p.succs_of(t)) {
        if (ready(u)) {
          next = u;
          if (++count > 1) break;
        }
      }
      const std::uint32_t after = next_on_stream[t];
      if (count < 2 && after != kNoChain && after != next && ready(after)) {
        next = after;
        ++count;
      }
      if (count != 1 || state[next] == kChained || !chainable(next)) break;
      if (!pass_start.empty() && pass_start[next]) break;
      state[next] = kInRun;
      run.push_back(next);
    }
    // Every task but the last must lead only to later tasks of the run, by its
    // dependents and on its stream: cut the run after the first that does not.
    // (Those it leads to past the cut wait for the cut's last task, directly
    // or on their stream: they cannot start before the chain ends.)
    std::size_t length = run.size();
    for (std::size_t i = 0; i + 1 < run.size(); ++i) {
      bool inside = true;
      for (const std::uint32_t s : p.succs_of(run[i])) inside &= state[s] == kInRun;
      const std::uint32_t after = next_on_stream[run[i]];
      inside &= after == kNoChain || state[after] == kInRun;
      if (!inside) {
        length = i + 1;
        break;
      }
    }
    if (length < 2) {
      for (const std::uint32_t t : run) state[t] = kFree;
      continue;
    }
    for (std::size_t i = length; i < run.size(); ++i) state[run[i]] = kFree;
    const auto c = static_cast<std::uint32_t>(out.size());
    for (std::size_t i = 0; i < length; ++i) {
      state[run[i]] = kChained;
      out.at[run[i]] = ChainPosition{c, static_cast<std::uint32_t>(i)};
      out.tasks.push_back(run[i]);
    }
    out.offsets.push_back(static_cast<std::uint32_t>(out.tasks.size()));
  }
  return out;
}

}  // namespace trainsim
