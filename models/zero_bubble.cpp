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
