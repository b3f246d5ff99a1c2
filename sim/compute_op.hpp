#pragma once
// A compute kernel as the cost model sees it: what it does (GEMM, fused
// attention, memory-bound), how much work (FLOPs, bytes) and its shape.
#include <cstdint>
#include <string>

#include "calibration/attention_kernel.hpp"
#include "calibration/memory_kernel.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

// HostCopy: a copy between HBM and host memory over the GPU's host link (activation
// offload), on a copy engine: bytes / (host_bandwidth / 2), no SMs.
enum class OpKind : std::uint8_t { Gemm, Attention, AttentionBackward, MemoryBound, HostCopy };

// Per-kernel cost of a kernel node inside a CUDA graph beyond its execution: 0.5 us,
// NVIDIA's "Getting Started with CUDA Graphs" (developer.nvidia.com/blog/cuda-graphs/):
// a 2.9 us kernel takes 3.8 us per kernel launched back to back on a stream and 3.4 us
// per kernel inside a graph, graph launch included. Host dispatch is paid once per graph.
constexpr double kGraphKernelSeconds = 0.5e-6;
// Per-kernel cost of a blocking launch (CUDA_LAUNCH_BLOCKING=1) beyond its execution:
// 6.7 us, the same blog's first loop, which synchronises the stream after every launch
// of its 2.9 us kernel: 9.6 us per kernel. The launch call, the kernel's start on the GPU
// and the host's notice of its end then follow one another, kernel after kernel (a V100
// with CUDA 10; the only published figure of the round trip). It replaces the profile's
// launch_overhead (the gap between asynchronous back-to-back launches) when larger.
constexpr double kSyncLaunchSeconds = 9.6e-6 - 2.9e-6;
// Host time of eager PyTorch's Python layer beyond the dispatcher call of each op, exposed as
// GPU idle time only under blocking launches (docs/frameworks.md, "Blocking launches"):
// - one nn.Module call: 2.17 us, the module wrapper around a kernel call (pytorch/pytorch
//   pull 50431: an almost empty module at 3.08 us a call against its 0.91 us torch op);
// - the autograd node an op records when grad mode is on and an input requires grad:
//   1.8 us (pytorch/pytorch issue 41383: 6.8 us per `2*x` with requires_grad, 5.0 us without);
// - a Python call of torch.autograd.backward, which the engine runs re-entrantly inside a
//   backward (DeepSpeed's CheckpointFunction): 31.3 us (pytorch/pytorch issue 44484,
//   x.backward() on a one-op graph).
constexpr double kModuleCallSeconds = 3.08e-6 - 0.91e-6;
constexpr double kAutogradRecordSeconds = 6.8e-6 - 5.0e-6;
constexpr double kBackwardCallSeconds = 31.3e-6;

struct ComputeOp {
  std::string name;  // e.g. "attn.qkv.fwd"
  OpKind kind = OpKind::Gemm;
  Dtype dtype = Dtype::BF16;
  double flops = 0;                  // FLOPs actually executed by the kernel(s)
  double bytes = 0;                  // HBM bytes read + written
  std::int64_t m = 0, n = 0, k = 0;  // GEMM shape (per GEMM) for shape-dependent efficiency
  int kernels = 1;                   // kernel launches the op stands for
  AttentionKernel attention_kernel = AttentionKernel::FlashAttention2;  // attention: which fused kernel
  // Fused attention with dropout inside the kernel (attention dropout p > 0): the profile's
  // `dropout_speed` of the kernel family scales its throughput.
  bool attention_dropout = false;
  // A measured duration (an imported trace replayed as profiled): when >= 0 the
  // op takes this long, times the GPU's slowdown, instead of its roofline cost.
  double measured_seconds = -1;
  // Host time per kernel before its CUDA launch (the framework's Python and dispatcher,
  // models/training_spec.hpp); 0: the host is never the bottleneck (the cost model's
  // result from before the mechanism, bit for bit).
  double host_dispatch_seconds = 0;
  // Each launch waits for its kernel (CUDA_LAUNCH_BLOCKING=1): the host dispatch is
  // added to the GPU time rather than overlapped with the previous kernels, and each
  // kernel pays the launch-and-synchronise round trip (kSyncLaunchSeconds).
  bool launch_blocking = false;
  // Dispatcher calls without a kernel the host runs for this op (views, transposes, splits,
  // expands, slices of the model code, and their autograd nodes in the backward), each at
  // host_dispatch_seconds. Charged only with launch_blocking: the GPU is idle while the
  // host runs them (asynchronous launches hide them behind queued kernels).
  int host_ops = 0;
  // Under blocking launches as well, each charged only with launch_blocking and host dispatch:
  // the op's nn.Module calls (kModuleCallSeconds each), its ops that record an autograd node
  // (kAutogradRecordSeconds), its Python calls of torch.autograd.backward
  // (kBackwardCallSeconds), and the NCCL launches next to it, each of which blocks as well:
  // the round trip (kSyncLaunchSeconds) and host dispatch of a launch whose kernel's own time
  // the communication model charges.
  int module_calls = 0;
  int autograd_records = 0;
  int backward_calls = 0;
  int comm_launches = 0;
  // The kernels run inside a captured CUDA graph (training.cuda_graphs): no per-kernel
  // host issue, and each kernel node costs the graph's per-kernel figure instead of
  // the profile's launch_overhead (docs/frameworks.md, "CUDA graphs").
  bool graph_captured = false;
  // An FP8 GEMM with the split accumulator (cuBLASLt FAST_ACCUM off): FP8 training runs
  // its backward GEMMs so; the profile's fp8_split_accumulator_speed prices it.
  bool split_accumulator = false;
  // A memory-bound op: which framework kernel it is, so that the profile's measured speed of
  // that implementation (`memory_kernels`) scales the `memory_bound` curve; Generic: the curve.
  MemoryKernel memory_kernel = MemoryKernel::Generic;

  bool operator==(const ComputeOp&) const = default;
};

}  // namespace trainsim
