#pragma once
// Uneven data-parallel shares of the batch: each replica runs its own number of
// micro-batches per iteration (parallel.dp_shares), e.g. fewer on a straggler or
// on a slower GPU type. The gradient reduction is unchanged (a weighted
// average of the replicas' gradients, the same bytes), so every replica still
// meets the others there; the slow one simply has less work before it.
#include <string>
#include <vector>

#include "models/training_spec.hpp"

namespace trainsim {

// What the schedule asks of one replica's micro-batch count: a multiple of
// `unit` (interleaved 1F1B: pp) and at least `min` (dualpipe-v: 2*pp).
struct ShareRule {
  int unit = 1;
  int min = 1;
};
ShareRule share_rule(const ParallelSpec& par);

// Why `count` micro-batches cannot be one replica's share under the schedule; empty when they can.
std::string share_problem(const ParallelSpec& par, int count);

// Shares of `total` micro-batches proportional to `speed` (one entry per
// replica): multiples of rule.unit, at least rule.min, summing to `total`
// exactly. Deterministic: the ideal share rounded down, the rest given one
// unit at a time to the largest remainder (the lowest replica on ties).
// Needs total to be a multiple of rule.unit and at least (replicas * rule.min).
std::vector<int> balanced_shares(int total, const std::vector<double>& speed, const ShareRule& rule);

// The layout one replica with `count` micro-batches runs: `par` with
// micro_batches() == count and no shares.
ParallelSpec replica_layout(const ParallelSpec& par, int count);

}  // namespace trainsim
