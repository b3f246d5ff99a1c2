#pragma once
// A compute kernel as the cost model sees it: what it does (GEMM, fused
// attention, memory-bound), how much work (FLOPs, bytes) and its shape.
#include <cstdint>
#include <string>

#include "calibration/attention_kernel.hpp"
#include "topologies/hardware.hpp"

namespace trainsim {

enum class OpKind : std::uint8_t { Gemm, Attention, AttentionBackward, MemoryBound };

struct ComputeOp {
  std::string name;  // e.g. "attn.qkv.fwd"
  OpKind kind = OpKind::Gemm;
  Dtype dtype = Dtype::BF16;
  double flops = 0;                  // FLOPs actually executed by the kernel(s)
  double bytes = 0;                  // HBM bytes read + written
  std::int64_t m = 0, n = 0, k = 0;  // GEMM shape (per GEMM) for shape-dependent efficiency
  int kernels = 1;                   // kernel launches the op stands for
  AttentionKernel attention_kernel = AttentionKernel::FlashAttention2;  // attention: which fused kernel
  // A measured duration (an imported trace replayed as profiled): when >= 0 the
  // op takes this long, times the GPU's slowdown, instead of its roofline cost.
  double measured_seconds = -1;
  // Host time per kernel before its CUDA launch (the framework's Python and dispatcher,
  // models/training_spec.hpp); 0: the host is never the bottleneck (the cost model's
  // result from before the mechanism, bit for bit).
  double host_dispatch_seconds = 0;
};

}  // namespace trainsim
