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

class ComputeCostModel {
 public:
  // profiles[t] is the profile of the cluster's GPU type t.
  ComputeCostModel(const Cluster& cluster, std::vector<CalibrationProfile> profiles);

  // compute_share < 1: the op runs beside a communication kernel that holds part of
  // the SMs, so its math (not its HBM traffic) is that much slower.
  Time duration(const ComputeOp& op, int gpu_type, double compute_share = 1.0) const;
  double seconds(const ComputeOp& op, int gpu_type, double compute_share = 1.0) const;
  const CalibrationProfile& profile(int gpu_type) const { return profiles_[gpu_type]; }

 private:
  const Cluster* cluster_;
  std::vector<CalibrationProfile> profiles_;
};

}  // namespace trainsim
