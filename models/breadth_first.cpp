#include "models/breadth_first.hpp"

#include "sim/check.hpp"

namespace trainsim {

PipelineSchedule breadth_first_schedule(int pp, int m, int vpp) {
  TRAINSIM_CHECK(pp >= 1 && m >= 1 && vpp >= 1, "breadth-first needs at least one rank, micro-batch and chunk");
  PipelineSchedule s;
  s.name = "breadth-first";
  s.stages = pp;
  s.microbatches = m;
  for (int v = 0; v < pp * vpp; ++v) s.chunk_stage.push_back(v % pp);
  s.units.assign(pp, {});
  for (auto& units : s.units) {
    for (int c = 0; c < vpp; ++c)
      for (int mb = 0; mb < m; ++mb) units.push_back(ScheduleUnit{UnitKind::Forward, mb, c});
    for (int c = vpp - 1; c >= 0; --c)
      for (int mb = 0; mb < m; ++mb) units.push_back(ScheduleUnit{UnitKind::Backward, mb, c});
  }
  return s;
}

}  // namespace trainsim
