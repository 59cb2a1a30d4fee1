// EmbeddingForward/Backward: fp32 vs the double reference (repeated tokens included), reference
// backward vs finite differences, accumulation. Tolerances: see test_util.h.
#include "backend/cpu/test_util.h"

namespace motley::backend::testing {
namespace {

TEST(EmbeddingTest, ForwardAndBackwardMatchReference) {
  const int64_t V = 11, C = 37, N = 9;
  std::vector<int32_t> tok = {3, 0, 10, 3, 3, 7, 0, 1, 10};  // repeats on purpose
  const auto w = RandomFloats(V * C, 1), g = RandomFloats(N * C, 2);
  CpuBackend be(2);
  Tensor ttok = I32Tensor({N}, tok), tw = F32Tensor({V, C}, w), tg = F32Tensor({N, C}, g);
  Tensor out = be.Empty({N, C}, tensor::DType::kF32);
  be.EmbeddingForward(out, ttok, tw);
  Vec ref_out;
  reference::EmbeddingForward(ref_out, tok, Widen(w), V, C);
  EXPECT_EQ(RelError(ToVec(out), ref_out), 0.0);  // a copy is exact

  Tensor dw = be.Zeros({V, C}, tensor::DType::kF32);
  be.EmbeddingBackward(dw, tg, ttok);
  Vec ref_dw(V * C, 0.0);
  reference::EmbeddingBackward(ref_dw, Widen(g), tok, V, C);
  EXPECT_LT(RelError(ToVec(dw), ref_dw), kF32Tol);
  be.EmbeddingBackward(dw, tg, ttok);
  EXPECT_LT(RelError(ToVec(dw), Times(ref_dw, 2.0)), kF32Tol);
}

TEST(EmbeddingReferenceTest, BackwardMatchesFiniteDifferences) {
  const int64_t V = 5, C = 3;
  const std::vector<int32_t> tok = {4, 1, 4, 0};
  Vec w = Widen(RandomFloats(V * C, 3));
  const Vec proj = Widen(RandomFloats(tok.size() * C, 4));
  auto loss = [&] {
    Vec out;
    reference::EmbeddingForward(out, tok, w, V, C);
    return Dot(out, proj);
  };
  Vec dw(V * C, 0.0);
  reference::EmbeddingBackward(dw, proj, tok, V, C);
  EXPECT_LT(RelError(dw, FiniteDiff(loss, w)), kFdTol);
}

TEST(EmbeddingDeathTest, TokenOutOfRangeAborts) {
  CpuBackend be;
  Tensor tw = F32Tensor({4, 2}, RandomFloats(8, 5));
  Tensor ttok = I32Tensor({2}, {1, 4});
  Tensor out = be.Empty({2, 2}, tensor::DType::kF32);
  EXPECT_DEATH(be.EmbeddingForward(out, ttok, tw), "token id out of range");
}

}  // namespace
}  // namespace motley::backend::testing
