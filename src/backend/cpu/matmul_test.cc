// MatmulForward/Backward: fp32 vs the double reference, reference backward vs finite differences,
// accumulation and skipped gradients. Tolerances: see test_util.h.
#include "backend/cpu/test_util.h"

namespace motley::backend::testing {
namespace {

struct MatmulCase {
  int64_t N, C, OC;
};

class MatmulTest : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulTest, ForwardAndBackwardMatchReference) {
  const auto [N, C, OC] = GetParam();
  const auto x = RandomFloats(static_cast<size_t>(N * C), 1);
  const auto w = RandomFloats(static_cast<size_t>(OC * C), 2);
  const auto g = RandomFloats(static_cast<size_t>(N * OC), 3);
  CpuBackend be(2);
  Tensor tx = F32Tensor({N, C}, x), tw = F32Tensor({OC, C}, w), tg = F32Tensor({N, OC}, g);
  Tensor out = be.Empty({N, OC}, tensor::DType::kF32);
  be.Fill(out, 7.0F);  // must be overwritten
  be.MatmulForward(out, tx, tw);
  Vec ref_out;
  reference::MatmulForward(ref_out, Widen(x), Widen(w), N, C, OC);
  EXPECT_LT(RelError(ToVec(out), ref_out), kF32Tol);

  Tensor dx = be.Zeros({N, C}, tensor::DType::kF32), dw = be.Zeros({OC, C}, tensor::DType::kF32);
  be.MatmulBackward(dx, dw, tg, tx, tw);
  Vec ref_dx(static_cast<size_t>(N * C)), ref_dw(static_cast<size_t>(OC * C));
  reference::MatmulBackward(&ref_dx, &ref_dw, Widen(g), Widen(x), Widen(w), N, C, OC);
  EXPECT_LT(RelError(ToVec(dx), ref_dx), kF32Tol);
  EXPECT_LT(RelError(ToVec(dw), ref_dw), kF32Tol);

  // Accumulation: a second call doubles both gradients.
  be.MatmulBackward(dx, dw, tg, tx, tw);
  EXPECT_LT(RelError(ToVec(dx), Times(ref_dx, 2.0)), kF32Tol);
  EXPECT_LT(RelError(ToVec(dw), Times(ref_dw, 2.0)), kF32Tol);
}

INSTANTIATE_TEST_SUITE_P(Sizes, MatmulTest,
                         ::testing::Values(MatmulCase{5, 13, 7}, MatmulCase{1, 8, 3},
                                           MatmulCase{64, 96, 80}, MatmulCase{33, 77, 129}));

TEST(MatmulReferenceTest, BackwardMatchesFiniteDifferences) {
  const int64_t N = 3, C = 5, OC = 4;
  Vec x = Widen(RandomFloats(N * C, 11)), w = Widen(RandomFloats(OC * C, 12));
  const Vec proj = Widen(RandomFloats(N * OC, 13));
  auto loss = [&] {
    Vec out;
    reference::MatmulForward(out, x, w, N, C, OC);
    return Dot(out, proj);
  };
  Vec dx(N * C, 0.0), dw(OC * C, 0.0);
  reference::MatmulBackward(&dx, &dw, proj, x, w, N, C, OC);
  EXPECT_LT(RelError(dx, FiniteDiff(loss, x)), kFdTol);
  EXPECT_LT(RelError(dw, FiniteDiff(loss, w)), kFdTol);
}

TEST(MatmulTest, UndefinedGradientIsSkipped) {
  const int64_t N = 4, C = 6, OC = 5;
  CpuBackend be;
  Tensor tx = F32Tensor({N, C}, RandomFloats(N * C, 21));
  Tensor tw = F32Tensor({OC, C}, RandomFloats(OC * C, 22));
  Tensor tg = F32Tensor({N, OC}, RandomFloats(N * OC, 23));
  Tensor dw = be.Zeros({OC, C}, tensor::DType::kF32), none;
  be.MatmulBackward(none, dw, tg, tx, tw);
  Vec ref_dw(OC * C, 0.0);
  reference::MatmulBackward(nullptr, &ref_dw, ToVec(tg), ToVec(tx), ToVec(tw), N, C, OC);
  EXPECT_LT(RelError(ToVec(dw), ref_dw), kF32Tol);
  Tensor dx = be.Zeros({N, C}, tensor::DType::kF32);
  be.MatmulBackward(dx, none, tg, tx, tw);
  Vec ref_dx(N * C, 0.0);
  reference::MatmulBackward(&ref_dx, nullptr, ToVec(tg), ToVec(tx), ToVec(tw), N, C, OC);
  EXPECT_LT(RelError(ToVec(dx), ref_dx), kF32Tol);
}

TEST(MatmulTest, AcceptsLeadingDimensions) {
  // inp (B, T, C) is treated as (B*T, C).
  CpuBackend be;
  Tensor tx = F32Tensor({2, 3, 4}, RandomFloats(24, 31));
  Tensor tw = F32Tensor({5, 4}, RandomFloats(20, 32));
  Tensor out = be.Empty({2, 3, 5}, tensor::DType::kF32);
  be.MatmulForward(out, tx, tw);
  Vec ref;
  reference::MatmulForward(ref, ToVec(tx), ToVec(tw), 6, 4, 5);
  EXPECT_LT(RelError(ToVec(out), ref), kF32Tol);
}

TEST(MatmulTest, EmptyInnerDimensionGivesZeros) {
  CpuBackend be;
  Tensor tx = be.Empty({3, 0}, tensor::DType::kF32), tw = be.Empty({2, 0}, tensor::DType::kF32);
  Tensor out = be.Empty({3, 2}, tensor::DType::kF32);
  be.Fill(out, 1.0F);
  be.MatmulForward(out, tx, tw);
  for (float x : Floats(out)) EXPECT_EQ(x, 0.0F);
}

}  // namespace
}  // namespace motley::backend::testing
