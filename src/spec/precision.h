// The numeric and kernel choices of a training run that the cost models read: the precision of
// matmuls and activations, and the attention kernel. Plain enums with their file names.
#pragma once

#include <optional>
#include <string_view>

namespace motley::spec {

// Precision of a run's matmuls and activations, and of a peak FLOP/s figure. kBf16 and kFp16 are
// mixed precision (16-bit operands, fp32 master weights and Adam moments).
enum class Precision { kFp32, kBf16, kFp16 };
inline constexpr int kNumPrecisions = 3;
inline constexpr int PrecisionIndex(Precision p) {
  return static_cast<int>(p);
}
// "fp32" | "bf16" | "fp16".
std::string_view PrecisionName(Precision p);
// Inverse of PrecisionName; nullopt for any other text.
std::optional<Precision> ParsePrecision(std::string_view text);

// Attention kernels: kUnfused materialises the s x s scores (two batched GEMMs around a softmax
// kernel, as motley's runtime and Megatron-LM before flash attention run it); kFused is one
// flash-attention kernel that never stores them.
enum class Attention { kUnfused, kFused };
// "unfused" | "fused".
std::string_view AttentionName(Attention a);
std::optional<Attention> ParseAttention(std::string_view text);

}  // namespace motley::spec
