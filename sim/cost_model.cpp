#include "sim/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "sim/check.hpp"

namespace trainsim {

double expected_max_of_normals(long n) {
  if (n <= 1) return 0.0;
  // E[max] = integral over x > 0 of (1 - F(x)^n) minus integral over x < 0 of F(x)^n, with
  // F the standard normal CDF; F^n as exp(n log F), log F from erfc for either tail's
  // precision. Simpson's rule on each half (the integrand jumps by 1 at 0), 32 intervals
  // per unit out to 9: within 1e-13 of a 256-per-unit integration for n up to 2^20.
  const double dn = static_cast<double>(n);
  auto f_pow_n = [&](double x) {
    const double log_f = x < 0 ? std::log(0.5 * std::erfc(-x / std::sqrt(2.0)))     // F(x) itself is small
                               : std::log1p(-0.5 * std::erfc(x / std::sqrt(2.0)));  // 1 - F(x) is small
    return std::exp(dn * log_f);
  };
  auto simpson = [](auto&& g, double a, double b) {
    constexpr int intervals = 9 * 32;
    const double h = (b - a) / intervals;
    double sum = g(a) + g(b);
    for (int i = 1; i < intervals; ++i) sum += g(a + i * h) * (i % 2 == 1 ? 4.0 : 2.0);
    return sum * h / 3;
  };
  return simpson([&](double x) { return 1.0 - f_pow_n(x); }, 0.0, 9.0) - simpson(f_pow_n, -9.0, 0.0);
}

ComputeCostModel::ComputeCostModel(const Cluster& cluster, std::vector<CalibrationProfile> profiles)
    : cluster_(&cluster), profiles_(std::move(profiles)) {
  // GPUs per model, from the node groups (a slowed GPU's type keeps its model's name).
  std::map<std::string, long> gpus_of_model;
  for (const NodeGroup& g : cluster.spec().groups) {
    gpus_of_model[g.node.gpu.name] += static_cast<long>(g.count) * g.node.gpus_per_node;
  }
  const std::optional<double> spread_override = cluster.spec().gpu_speed_spread;
  slowest_.resize(static_cast<std::size_t>(cluster.num_gpu_types()));
  for (int t = 0; t < cluster.num_gpu_types(); ++t) {
    SlowestGpu& s = slowest_[t];
    s.spread = spread_override ? *spread_override : profiles_[t].gpu_speed_spread.value;
    const auto it = gpus_of_model.find(cluster.gpu_type(t).name);
    s.gpus = it == gpus_of_model.end() ? 0 : it->second;
    if (s.spread > 0) s.factor = 1.0 + s.spread * expected_max_of_normals(s.gpus);
  }
}

double ComputeCostModel::seconds(const ComputeOp& op, int gpu_type, double compute_share) const {
  const GpuSpec& gpu = cluster_->gpu_type(gpu_type);
  // A profiled duration already holds its launch gaps and the contention of the run it was measured in.
  // Everything the GPU runs waits for the job's slowest GPU of the type; host-side work does not.
  const double slow = gpu.slowdown * slowest_[gpu_type].factor;
  if (op.measured_seconds >= 0) return op.measured_seconds * slow;
  if (op.kind == OpKind::HostCopy) {
    TRAINSIM_CHECK(gpu.host_bandwidth > 0, "host copy on " + gpu.name + ", which has no host_bandwidth");
    return op.bytes / (gpu.host_bandwidth / 2);  // one direction of the link
  }
  const CalibrationProfile& p = profiles_[gpu_type];
  // The bandwidth curve is per kernel: an op of several launches moves bytes / kernels in each.
  // A framework kernel with a measured speed of its own (`memory_kernels`) runs at that share of the curve.
  const double kernel_speed = p.memory_kernels[static_cast<std::size_t>(op.memory_kernel)].value;
  const double mem_bw =
      gpu.memory_bandwidth * p.memory_bound.curve.at(op.bytes / std::max(op.kernels, 1)) * kernel_speed;
  const double mem_time = op.bytes > 0 ? op.bytes / mem_bw : 0.0;
  double compute_time = 0;
  switch (op.kind) {
    case OpKind::Gemm: {
      const auto d = static_cast<std::size_t>(op.dtype);
      const double eff_size = p.gemm[d].curve.at(op.flops / std::max(op.kernels, 1));
      const double min_dim = static_cast<double>(std::min({op.m, op.n, op.k}));
      const double split = op.split_accumulator ? p.fp8_split_accumulator_speed.value : 1.0;
      // A GEMM whose K is its smallest dimension pays the profile's small-K factor on top,
      // unless it is cubic (M = N = K): the size curve was fitted on such GEMMs.
      const bool k_smallest =
          !p.gemm_small_k.curve.empty() &&
          small_k_applies(static_cast<double>(op.m), static_cast<double>(op.n), static_cast<double>(op.k));
      const double small_k = k_smallest ? p.gemm_small_k.curve.at(static_cast<double>(op.k)) : 1.0;
      const double eff = eff_size * p.gemm_min_dim.curve.at(min_dim) * small_k * split;
      compute_time = op.flops / (gpu.peak(op.dtype) * eff);
      break;
    }
    case OpKind::Attention:
    case OpKind::AttentionBackward: {
      const bool backward = op.kind == OpKind::AttentionBackward;
      const AttentionKernelCurves& family = p.attention_kernels[static_cast<std::size_t>(op.attention_kernel)];
      const EfficiencyCurve* c = nullptr;
      double speed = 1.0;
      if (!family.forward.curve.empty()) {  // a family with its own curves (cuDNN, FlashAttention-3)
        c = backward && !family.backward.curve.empty() ? &family.backward.curve : &family.forward.curve;
        // Dropout inside the kernel (docs/calibration.md, "Dropout inside fused attention").
        if (op.attention_dropout) speed = family.dropout_speed.value;
      } else {
        // Scenario loading rejects a family without curves in every GPU's profile.
        TRAINSIM_CHECK(
            op.attention_kernel == AttentionKernel::FlashAttention2 || op.attention_kernel == AttentionKernel::Triton,
            "attention kernel family without curves in the profile of " + p.gpu);
        c = backward && !p.attention_backward.curve.empty() ? &p.attention_backward.curve : &p.attention.curve;
        speed = op.attention_kernel == AttentionKernel::Triton ? p.triton_attention_speed.value : 1.0;
        TRAINSIM_CHECK(speed > 0, "Triton attention without triton_attention_speed in the profile of " + p.gpu);
      }
      compute_time = op.flops / (gpu.peak(op.dtype) * c->at(op.flops / std::max(op.kernels, 1)) * speed);
      break;
    }
    case OpKind::MemoryBound:
    case OpKind::HostCopy:
      break;
  }
  // A perturbed GPU (a straggler, a throttled one) takes `slowdown` times as long for everything.
  // Inside a CUDA graph a kernel node costs kGraphKernelSeconds (models/training_spec.hpp)
  // rather than an eager launch, and the host issues the graph once, not each kernel.
  const double launch =
      op.graph_captured ? std::min(p.launch_overhead.value, kGraphKernelSeconds) : p.launch_overhead.value;
  const double gpu_time = (std::max(compute_time / compute_share, mem_time) + op.kernels * launch) * slow;
  if (op.host_dispatch_seconds <= 0 || op.graph_captured) return gpu_time;
  // Blocking launches (CUDA_LAUNCH_BLOCKING=1): the host dispatches a kernel only after
  // the previous one has finished, so nothing of the dispatch hides behind the GPU.
  // Each kernel then costs the launch-and-synchronise round trip (kSyncLaunchSeconds,
  // sim/compute_op.hpp) instead of the asynchronous launch gap.
  if (op.launch_blocking) {
    const double round_trip = std::max(launch, kSyncLaunchSeconds);
    return gpu_time + (op.kernels * (round_trip - launch)) * slow +
           (op.kernels + op.host_ops) * op.host_dispatch_seconds + op.module_calls * kModuleCallSeconds +
           op.autograd_records * kAutogradRecordSeconds + op.backward_calls * kBackwardCallSeconds +
           op.comm_launches * (kSyncLaunchSeconds + op.host_dispatch_seconds);
  }
  // Host dispatch: the host issues each kernel after the framework's dispatch and the CUDA
  // launch (the profile's launch_overhead), and the stream cannot run ahead of the host. In
  // the steady state of the asynchronous launch queue the op takes the longer of its GPU
  // time and its kernels' host issue time (docs/frameworks.md, "Host dispatch").
  return std::max(gpu_time, op.kernels * (p.launch_overhead.value + op.host_dispatch_seconds));
}

Time ComputeCostModel::duration(const ComputeOp& op, int gpu_type, double compute_share) const {
  return Time::seconds(seconds(op, gpu_type, compute_share));
}

}  // namespace trainsim
