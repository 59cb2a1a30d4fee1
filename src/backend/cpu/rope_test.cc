// RopeForward/Backward: fp32 vs the double reference (in place too), reference backward vs finite
// differences, accumulation, and the HF rotate_half layout. Tolerances: see test_util.h.
#include "backend/cpu/test_util.h"

namespace motley::backend::testing {
namespace {

struct RopeCase {
  int64_t B, T, H, HS, pos;
};
class RopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, ForwardAndBackwardMatchReference) {
  const auto [B, T, H, HS, pos] = GetParam();
  const float theta = 10000.0F;
  const int64_t n = B * T * H * HS;
  const reference::RopeDims d{B, T, H, HS};
  const auto x = RandomFloats(n, 1), g = RandomFloats(n, 2);
  CpuBackend be(2);
  Tensor tx = F32Tensor({B, T, H, HS}, x), tg = F32Tensor({B, T, H, HS}, g);
  Tensor out = be.Empty({B, T, H, HS}, tensor::DType::kF32);
  be.RopeForward(out, tx, pos, theta);
  Vec ref_out;
  reference::RopeForward(ref_out, Widen(x), d, pos, static_cast<double>(theta));
  EXPECT_LT(RelError(ToVec(out), ref_out), kF32Tol);

  // In place (out aliases inp) gives the same values.
  Tensor inplace = F32Tensor({B, T, H, HS}, x);
  be.RopeForward(inplace, inplace, pos, theta);
  EXPECT_EQ(Floats(inplace), Floats(out));

  Tensor dx = be.Zeros({B, T, H, HS}, tensor::DType::kF32);
  be.RopeBackward(dx, tg, pos, theta);
  Vec ref_dx(n, 0.0);
  reference::RopeBackward(ref_dx, Widen(g), d, pos, static_cast<double>(theta));
  EXPECT_LT(RelError(ToVec(dx), ref_dx), kF32Tol);
  be.RopeBackward(dx, tg, pos, theta);
  EXPECT_LT(RelError(ToVec(dx), Times(ref_dx, 2.0)), kF32Tol);
}

INSTANTIATE_TEST_SUITE_P(Sizes, RopeTest,
                         ::testing::Values(RopeCase{1, 1, 1, 2, 0}, RopeCase{2, 5, 3, 8, 0},
                                           RopeCase{1, 7, 2, 6, 100}, RopeCase{2, 64, 4, 64, 960}));

TEST(RopeReferenceTest, BackwardMatchesFiniteDifferences) {
  const reference::RopeDims d{2, 3, 2, 4};
  Vec x = Widen(RandomFloats(48, 3));
  const Vec proj = Widen(RandomFloats(48, 4));
  auto loss = [&] {
    Vec out;
    reference::RopeForward(out, x, d, 5, 10000.0);
    return Dot(out, proj);
  };
  Vec dx(48, 0.0);
  reference::RopeBackward(dx, proj, d, 5, 10000.0);
  EXPECT_LT(RelError(dx, FiniteDiff(loss, x)), kFdTol);
}

TEST(RopeTest, RotatesPairsIAndIPlusHalf) {
  // HS = 4, position 1, theta = 100: pair (0, 2) turns by 1 rad, pair (1, 3) by 100^(-1/2) = 0.1.
  CpuBackend be;
  Tensor x = F32Tensor({1, 2, 1, 4}, {0, 0, 0, 0, 1, 1, 0, 0});
  Tensor out = be.Empty({1, 2, 1, 4}, tensor::DType::kF32);
  be.RopeForward(out, x, 0, 100.0F);
  const float* o = out.data<float>();
  EXPECT_NEAR(o[4], std::cos(1.0), 1e-6);
  EXPECT_NEAR(o[6], std::sin(1.0), 1e-6);
  EXPECT_NEAR(o[5], std::cos(0.1), 1e-6);
  EXPECT_NEAR(o[7], std::sin(0.1), 1e-6);
}

}  // namespace
}  // namespace motley::backend::testing
