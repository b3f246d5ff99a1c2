#include "models/schedule.hpp"

#include <algorithm>

namespace trainsim {

namespace {

// Megatron-LM's interleaved ordering: micro-batches go in groups of pp through
// chunk 0, then the same group through chunk 1, ...; backward walks chunks in reverse.
WorkUnit interleaved_unit(int k, bool forward, int pp, int vpp) {
  const int group = k / (pp * vpp);
  const int within = k % (pp * vpp);
  int chunk = within / pp;
  if (!forward) chunk = vpp - 1 - chunk;
  return WorkUnit{forward, group * pp + within % pp, chunk};
}

int warmup_units(ScheduleKind kind, int stage, int pp, int m, int vpp) {
  switch (kind) {
    case ScheduleKind::GPipe:
      return m;
    case ScheduleKind::OneFOneB:
      return std::min(pp - stage - 1, m);
    case ScheduleKind::Interleaved1F1B:
      return std::min((pp - stage - 1) * 2 + (vpp - 1) * pp, m * vpp);
  }
  return m;
}

}  // namespace

std::vector<WorkUnit> pipeline_order(ScheduleKind kind, int stage, int pp, int m, int vpp) {
  std::vector<WorkUnit> order;
  const int units = kind == ScheduleKind::Interleaved1F1B ? m * vpp : m;
  order.reserve(2 * static_cast<std::size_t>(units));
  auto unit = [&](int k, bool forward) {
    return kind == ScheduleKind::Interleaved1F1B ? interleaved_unit(k, forward, pp, vpp) : WorkUnit{forward, k, 0};
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

int max_inflight_chunks(ScheduleKind kind, int stage, int pp, int m, int vpp) {
  const int units = kind == ScheduleKind::Interleaved1F1B ? m * vpp : m;
  return std::min(warmup_units(kind, stage, pp, m, vpp) + 1, units);
}

}  // namespace trainsim
