#pragma once
// The fused-attention kernel families a step can run. Their speeds differ by up
// to 2x on the same GPU (cuDNN fused attention vs FlashAttention-2 on H200), so
// the profile holds curves per family and each attention op names its family.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace trainsim {

enum class AttentionKernel : std::uint8_t {
  FlashAttention2,  // Dao 2023 (arXiv 2307.08691): the profile's `attention` curves
  FlashAttention3,  // Shah et al. 2024 (arXiv 2407.08608), Hopper only
  Cudnn,            // cuDNN fused attention (Transformer Engine's default on Hopper/Blackwell)
  Triton,           // FlashAttention in Triton: FlashAttention-2 curves x triton_attention_speed
};
inline constexpr std::size_t kNumAttentionKernels = 4;

// Profile key of a family with its own curves (`attention_kernels.<key>`), "" for
// FlashAttention-2 and Triton, whose figures live in `attention` and `triton_attention_speed`.
constexpr std::string_view attention_kernel_key(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::FlashAttention3:
      return "flash-attention-3";
    case AttentionKernel::Cudnn:
      return "cudnn";
    default:
      return "";
  }
}

}  // namespace trainsim
