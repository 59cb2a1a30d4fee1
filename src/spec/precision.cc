// See precision.h.
#include "spec/precision.h"

namespace motley::spec {

std::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

std::optional<Precision> ParsePrecision(std::string_view text) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    if (text == PrecisionName(p)) return p;
  }
  return std::nullopt;
}

std::string_view AttentionName(Attention a) {
  return a == Attention::kFused ? "fused" : "unfused";
}

std::optional<Attention> ParseAttention(std::string_view text) {
  for (Attention a : {Attention::kUnfused, Attention::kFused}) {
    if (text == AttentionName(a)) return a;
  }
  return std::nullopt;
}

}  // namespace motley::spec
