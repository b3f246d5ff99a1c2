#pragma once
// Kernel durations from calibration profiles: the profile's efficiency tables
// scale the GPU's spec peak (roofline of compute vs HBM traffic), plus launch
// overhead. One profile per GPU type serves every scenario on that GPU.
#include <vector>

#include "calibration/profile.hpp"
#include "sim/compute_op.hpp"
#include "sim/time.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

// E[max] of n independent standard normal variables (0 for n <= 1): how many
// standard deviations the slowest of n GPUs lies beyond the median one.
double expected_max_of_normals(long n);

// A synchronous job waits for its slowest GPU at every collective and pipeline
// hand-off, so every GPU of a type runs at that GPU's expected pace: `gpus` of
// the type, `spread` the profile's gpu_speed_spread (or the cluster's override),
// factor = 1 + spread x expected_max_of_normals(gpus) (docs/calibration.md).
struct SlowestGpu {
  double spread = 0;
  long gpus = 0;
  double factor = 1.0;
};

class ComputeCostModel {
 public:
  // profiles[t] is the profile of the cluster's GPU type t.
  ComputeCostModel(const Cluster& cluster, std::vector<CalibrationProfile> profiles);

  // compute_share < 1: the op runs beside a communication kernel that holds part of
  // the SMs, so its math (not its HBM traffic) is that much slower.
  Time duration(const ComputeOp& op, int gpu_type, double compute_share = 1.0) const;
  double seconds(const ComputeOp& op, int gpu_type, double compute_share = 1.0) const;
  const CalibrationProfile& profile(int gpu_type) const { return profiles_[gpu_type]; }
  // The expected slowest GPU of the type's model in the cluster (its kernels take `factor` times as long).
  const SlowestGpu& slowest_gpu(int gpu_type) const { return slowest_[gpu_type]; }

 private:
  const Cluster* cluster_;
  std::vector<CalibrationProfile> profiles_;
  std::vector<SlowestGpu> slowest_;  // per GPU type
};

}  // namespace trainsim
