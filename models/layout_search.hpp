#pragma once
// Candidate parallel layouts of one model on one cluster for the auto-search
// (docs/sweeps.md): every combination of the search-space lists, with invalid
// (check_layout), redundant, out-of-memory and dominated layouts pruned before any simulation.
#include <cstddef>
#include <vector>

#include "models/training_spec.hpp"

namespace trainsim {

// Default: context parallelism only while each CP rank keeps this many tokens of a
// sequence (shorter chunks leave attention and the GEMMs small and cost simulation
// time on layouts that do not win).
inline constexpr int kMinTokensPerCpRank = 2048;

// The lists the search enumerates. Empty tp: 1 .. GPUs per node; empty pp:
// 1 .. layers; empty cp: 1, 2, 4, 8 where each CP rank keeps >= kMinTokensPerCpRank tokens.
// MoE models (models/moe.hpp): empty ep: every divisor of the expert count; empty
// etp: 1 and tp (folded and coupled expert TP). Dense models search ep = 1 only.
struct LayoutSearchSpace {
  std::vector<int> tp, pp, cp, ep, etp;
  std::vector<int> vpp{1, 2, 4, 5, 8, 10};
  // The schedules tried with vpp > 1 (chunk v on rank v mod pp): Megatron-LM's
  // interleaved 1F1B, and breadth-first (models/breadth_first.hpp) when asked for:
  // it doubles the looped layouts, so it is opt-in (docs/sweeps.md).
  std::vector<ScheduleKind> vpp_schedules{ScheduleKind::Interleaved1F1B};
  std::vector<int> micro_batch{1, 2, 4, 8};
  std::vector<Recompute> recompute{Recompute::None, Recompute::Selective, Recompute::Full};
  std::vector<int> zero{0, 1, 2, 3};
  std::vector<bool> sequence_parallel{true};
  bool prune_dominated = true;
};

struct LayoutSearchResult {
  std::size_t grid = 0;              // combinations of the search-space lists
  std::size_t invalid = 0;           // break a layout rule, or tp beyond one node
  std::size_t redundant = 0;         // same run as another combination (zero with dp*cp = 1, sp with tp = 1)
  std::size_t pruned_oom = 0;        // the memory model says out of memory on some stage
  std::size_t pruned_dominated = 0;  // a cheaper recompute / ZeRO option of the same layout fits
  // The layouts to simulate, in enumeration order (tp, pp, cp, vpp, schedule,
  // micro_batch, ep, etp, sequence_parallel, recompute, zero; the first varies slowest).
  std::vector<ParallelSpec> candidates;
};

// `base` gives global_batch and the schedule for vpp = 1 (one of one chunk per
// rank, or a V schedule; an interleaved or breadth-first base means 1f1b); its
// other settings are copied into every candidate.
// `memory_capacity`: bytes usable per GPU (memory minus what the runtime reserves).
LayoutSearchResult search_layouts(const TransformerSpec& model, const TrainingSpec& training,
                                  const ClusterSpec& cluster, const ParallelSpec& base, double memory_capacity,
                                  const LayoutSearchSpace& space);

}  // namespace trainsim
