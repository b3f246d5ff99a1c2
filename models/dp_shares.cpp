#include "models/dp_shares.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace trainsim {

ShareRule share_rule(const ParallelSpec& par) {
  ShareRule r;
  if (par.schedule == ScheduleKind::Interleaved1F1B) r.unit = r.min = par.pp;
  if (par.schedule == ScheduleKind::DualPipeV) r.min = 2 * par.pp;
  r.min = (r.min + r.unit - 1) / r.unit * r.unit;
  return r;
}

std::string share_problem(const ParallelSpec& par, int count) {
  if (count < 1) return "a replica needs at least one micro-batch, found " + std::to_string(count);
  const ShareRule r = share_rule(par);
  if (par.schedule == ScheduleKind::DualPipeV && count < r.min) {
    return "dualpipe-v needs at least 2*pp = " + std::to_string(r.min) + " micro-batches per replica, found " +
           std::to_string(count);
  }
  if (count % r.unit != 0) {
    return "interleaved-1f1b needs each replica's micro-batch count to be a multiple of pp = " +
           std::to_string(r.unit) + ", found " + std::to_string(count);
  }
  return {};
}

std::vector<int> balanced_shares(int total, const std::vector<double>& speed, const ShareRule& rule) {
  const auto n = speed.size();
  std::vector<int> units(n, rule.min / rule.unit);
  if (n == 0) return units;
  const double sum = std::accumulate(speed.begin(), speed.end(), 0.0);
  const int total_units = total / rule.unit;
  std::vector<double> ideal(n);
  int given = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ideal[i] = sum > 0 ? total_units * speed[i] / sum : static_cast<double>(total_units) / static_cast<double>(n);
    units[i] = std::max(units[i], static_cast<int>(std::floor(ideal[i])));
    given += units[i];
  }
  // Raising a replica to the minimum may have given too much: take it back from
  // the replica furthest above its ideal; then hand out what is left to the
  // largest remainders.
  while (given > total_units) {
    std::size_t pick = n;
    for (std::size_t i = 0; i < n; ++i) {
      if (units[i] * rule.unit <= rule.min) continue;
      if (pick == n || units[i] - ideal[i] > units[pick] - ideal[pick]) pick = i;
    }
    if (pick == n) break;  // every replica at the minimum: the caller checked total >= n * min
    --units[pick];
    --given;
  }
  while (given < total_units) {
    std::size_t pick = 0;
    for (std::size_t i = 1; i < n; ++i) {
      if (ideal[i] - units[i] > ideal[pick] - units[pick]) pick = i;
    }
    ++units[pick];
    ++given;
  }
  for (int& u : units) u *= rule.unit;
  return units;
}

ParallelSpec replica_layout(const ParallelSpec& par, int count) {
  ParallelSpec p = par;
  p.replica_micro_batches = count;
  p.dp_shares.clear();
  p.dp_shares_balanced = false;
  p.custom_schedule.microbatches = count;
  return p;
}

}  // namespace trainsim
