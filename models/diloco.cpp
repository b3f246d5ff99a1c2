#include "models/diloco.hpp"

#include <algorithm>

namespace trainsim {

DilocoTiming diloco_timing(const DilocoSpec& spec, double inner_step_s, double fragment_sync_s,
                           double fragment_outer_compute_s) {
  DilocoTiming t;
  const double fragments = spec.fragments;
  const double inner = spec.inner_steps * inner_step_s;
  const double exposed_per_fragment = std::max(0.0, fragment_sync_s - spec.overlap_steps * inner_step_s);
  // Exposed: what the overlap leaves of each fragment, or what the WAN needs beyond the inner steps.
  t.exposed_sync_s = std::max(fragments * exposed_per_fragment, fragments * fragment_sync_s - inner);
  t.outer_compute_s = fragments * fragment_outer_compute_s;
  t.outer_step_s = inner + t.exposed_sync_s + t.outer_compute_s;
  t.compute_utilization = t.outer_step_s > 0 ? inner / t.outer_step_s : 0;
  return t;
}

double diloco_outer_step_bytes_per_param(const DilocoSpec& spec) {
  // PyTorch's SGD with Nesterov momentum on fp32 state (the DiLoCo outer
  // optimiser, arXiv:2311.08105 §2): pseudo-gradient = snapshot - parameters
  // (read 2, write 1 fp32), momentum update and step (read gradient, momentum,
  // snapshot; write momentum, snapshot, parameters: 6 fp32), and the
  // quantisation round trip of the communicated buffer (read fp32, write
  // outer_bytes; read outer_bytes, write fp32) when it is below fp32.
  constexpr double kFp32 = 4;
  double bytes = 3 * kFp32 + 6 * kFp32;
  if (spec.outer_bytes < kFp32) bytes += 2 * (kFp32 + spec.outer_bytes);
  return bytes;
}

double wan_allreduce_bytes(double params, int sites, double bytes_per_element) {
  if (sites < 2) return 0;
  return params * bytes_per_element * 2.0 * (sites - 1);
}

}  // namespace trainsim
