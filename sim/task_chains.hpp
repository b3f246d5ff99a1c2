#pragma once
// Runs of tasks of one program that execute strictly one after another: when
// one ends, exactly one dependent becomes ready, the next (dependencies from
// before the run assumed done; the executor checks that they are), and every
// task but the last leads, by its dependents and on its stream, only to later
// tasks of the run (some past its last task, when it had to be cut: they wait
// for that last task). The
// executor walks such a run without an event per task (sim/executor.cpp), so
// one analytical configuration costs fewer heap operations (docs/performance.md).
#include <cstdint>
#include <span>
#include <vector>

#include "sim/program.hpp"

namespace trainsim {

inline constexpr std::uint32_t kNoChain = ~std::uint32_t{0};

// A task's chain (kNoChain when in none) and its position there, side by side:
// the executor reads both together.
struct ChainPosition {
  std::uint32_t chain = kNoChain;
  std::uint32_t index = 0;
};

struct TaskChains {
  std::vector<ChainPosition> at;       // per task
  std::vector<std::uint32_t> offsets;  // CSR: tasks of each chain in execution order
  std::vector<std::uint32_t> tasks;
  std::vector<std::uint32_t> stream_index;  // per task: its index into ProgramTemplate::stream_tasks
  bool streams_in_task_order = true;        // each stream's tasks in increasing task order (no reorder)
  // With cut_at_passes: per task the marked pass it lies in (kNoChain: none),
  // and per pass whether its chains were found (find_pass_chains).
  std::vector<std::uint32_t> pass_of;
  std::vector<std::uint8_t> pass_found;
  // Passes whose chains were found, by key and shape (find_pass_chains):
  // a later pass of the same key and shape takes their chains, shifted.
  struct PassChains {
    std::uint32_t key = 0, first = 0, count = 0;
    std::uint32_t first_chain = 0, chains = 0;  // its chains: [first_chain, first_chain + chains)
    std::vector<std::int32_t> shape;
  };
  std::vector<PassChains> pass_chains;
  std::uint32_t reused_passes = 0;  // passes whose chains were taken from an earlier one
  // find_pass_chains' scratch, kept between calls (one pass at a time).
  std::vector<std::int32_t> shape_scratch;
  std::vector<std::uint8_t> states_scratch;
  std::vector<std::uint32_t> run_scratch;
  std::size_t size() const { return offsets.empty() ? 0 : offsets.size() - 1; }
  std::span<const std::uint32_t> chain(std::uint32_t c) const {
    return {tasks.data() + offsets[c], offsets[c + 1] - offsets[c]};
  }
};

// Chains of at least two tasks made of compute tasks and of collectives on the
// slots marked in `linkable_slot` (those the caller can time without a
// rendezvous or a network event).
// With `cut_at_passes`, no chain enters or leaves a marked pass
// (ProgramTemplate::passes), so that the executor sees the pass start and may
// apply a memo of it; inside a pass a run also ends at a task that leads out
// of the pass (a dependent or the next task on its stream outside it), so a
// pass's chains depend on the pass alone. Then only the chains outside the
// passes are found here; those of a pass are found by find_pass_chains when
// first needed (a pass applied from the memo needs none). Chain ids are
// assigned in the order chains are found; the chains themselves do not depend
// on that order.
TaskChains find_task_chains(const ProgramTemplate& program, std::span<const std::uint8_t> linkable_slot,
                            bool cut_at_passes = false);
// Adds the chains of marked pass `pass` to `chains` (found with cut_at_passes),
// once. A pass's chains depend only on its tasks' fields and inner
// dependencies, which its key fixes, and on its shape: which of its tasks
// lead out of it and where each task's neighbours on its stream lie. With
// `reuse`, a pass of the key and shape of one found before takes that one's
// chains, shifted, instead of walking its tasks (the same chains).
inline constexpr std::size_t kMaxPassShapes = 64;  // shapes kept per program
void find_pass_chains(const ProgramTemplate& program, std::span<const std::uint8_t> linkable_slot, std::uint32_t pass,
                      TaskChains& chains, bool reuse = true);

}  // namespace trainsim
