// SwiGluForward/Backward: fp32 vs the double reference, reference backward vs finite differences,
// accumulation. Tolerances: see test_util.h.
#include "backend/cpu/test_util.h"

namespace motley::backend::testing {
namespace {

class SwiGluTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(SwiGluTest, ForwardAndBackwardMatchReference) {
  const int64_t n = GetParam();
  const auto gate = RandomFloats(n, 1, -6.0F, 6.0F), up = RandomFloats(n, 2),
             g = RandomFloats(n, 3);
  CpuBackend be(2);
  Tensor tgate = F32Tensor({n}, gate), tup = F32Tensor({n}, up), tg = F32Tensor({n}, g);
  Tensor out = be.Empty({n}, tensor::DType::kF32);
  be.SwiGluForward(out, tgate, tup);
  Vec ref_out;
  reference::SwiGluForward(ref_out, Widen(gate), Widen(up));
  EXPECT_LT(RelError(ToVec(out), ref_out), kF32Tol);

  Tensor dgate = be.Zeros({n}, tensor::DType::kF32), dup = be.Zeros({n}, tensor::DType::kF32);
  be.SwiGluBackward(dgate, dup, tg, tgate, tup);
  Vec ref_dgate(n, 0.0), ref_dup(n, 0.0);
  reference::SwiGluBackward(ref_dgate, ref_dup, Widen(g), Widen(gate), Widen(up));
  EXPECT_LT(RelError(ToVec(dgate), ref_dgate), kF32Tol);
  EXPECT_LT(RelError(ToVec(dup), ref_dup), kF32Tol);
  be.SwiGluBackward(dgate, dup, tg, tgate, tup);
  EXPECT_LT(RelError(ToVec(dgate), Times(ref_dgate, 2.0)), kF32Tol);
  EXPECT_LT(RelError(ToVec(dup), Times(ref_dup, 2.0)), kF32Tol);
}

INSTANTIATE_TEST_SUITE_P(Sizes, SwiGluTest, ::testing::Values(1, 7, 1000, 40001));

TEST(SwiGluReferenceTest, BackwardMatchesFiniteDifferences) {
  Vec gate = Widen(RandomFloats(23, 4, -4.0F, 4.0F)), up = Widen(RandomFloats(23, 5));
  const Vec proj = Widen(RandomFloats(23, 6));
  auto loss = [&] {
    Vec out;
    reference::SwiGluForward(out, gate, up);
    return Dot(out, proj);
  };
  Vec dgate(23, 0.0), dup(23, 0.0);
  reference::SwiGluBackward(dgate, dup, proj, gate, up);
  EXPECT_LT(RelError(dgate, FiniteDiff(loss, gate)), kFdTol);
  EXPECT_LT(RelError(dup, FiniteDiff(loss, up)), kFdTol);
}

}  // namespace
}  // namespace motley::backend::testing
