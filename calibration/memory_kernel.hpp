#pragma once
// The memory-bound kernel implementations whose achieved bandwidth a profile can give
// relative to its `memory_bound` curve. The curve is a STREAM-like figure; a framework's
// own norm or cast kernel can run well below it (apex's LayerNorm, Transformer Engine's
// FP8 cast-transpose), so an op names its implementation and the profile holds a
// measured speed per implementation (docs/calibration.md, "Memory-bound kernels").
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trainsim {

enum class MemoryKernel : std::uint8_t {
  Generic,                // the `memory_bound` curve as it is
  ApexLayerNormForward,   // apex fused_layer_norm_cuda's forward (cuApplyLayerNorm / cuApplyRMSNorm)
  ApexLayerNormBackward,  // its three backward kernels (part and final gamma/beta sums, input gradient)
  TeCastTranspose,        // Transformer Engine's FP8 cast-transpose (delayed scaling, amax in the kernel)
};
inline constexpr std::size_t kNumMemoryKernels = 4;

// Profile key of an implementation (`memory_kernels.<key>`); "" for Generic.
constexpr std::string_view memory_kernel_key(MemoryKernel k) {
  switch (k) {
    case MemoryKernel::ApexLayerNormForward:
      return "apex-layer-norm-forward";
    case MemoryKernel::ApexLayerNormBackward:
      return "apex-layer-norm-backward";
    case MemoryKernel::TeCastTranspose:
      return "te-cast-transpose";
    default:
      return "";
  }
}

}  // namespace trainsim
