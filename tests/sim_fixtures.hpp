#pragma once
// Small hand-made clusters and profiles for engine tests.
#include "calibration/profile.hpp"
#include "topology_fixtures.hpp"

namespace trainsim::testing {

// Every kernel at exactly the spec peak, no launch overhead, links at full
// bandwidth; latencies as given.
inline CalibrationProfile ideal_profile(double hop_latency = 0, double base_latency = 0) {
  CalibrationProfile p;
  p.gpu = "toy";
  for (auto& c : p.gemm) c.curve = EfficiencyCurve::constant(1.0);
  p.gemm_min_dim.curve = EfficiencyCurve::constant(1.0);
  p.attention.curve = EfficiencyCurve::constant(1.0);
  p.memory_bound.curve = EfficiencyCurve::constant(1.0);
  p.scaleup.busbw_efficiency.value = 1.0;
  p.network.busbw_efficiency.value = 1.0;
  p.scaleup.latency.value = p.network.latency.value = hop_latency;
  p.scaleup.base_latency.value = p.network.base_latency.value = base_latency;
  return p;
}

}  // namespace trainsim::testing
