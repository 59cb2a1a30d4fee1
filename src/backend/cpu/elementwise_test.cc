// Add, AddInPlace, Scale, SumSquares, Sum: fp32 vs the double reference. Tolerances: see
// test_util.h (the sums are accumulated in double, so they are compared at 1e-12).
#include "backend/cpu/test_util.h"

namespace motley::backend::testing {
namespace {

class ElementwiseTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ElementwiseTest, MatchReference) {
  const int64_t n = GetParam();
  const auto a = RandomFloats(n, 1), b = RandomFloats(n, 2);
  CpuBackend be(2);
  Tensor ta = F32Tensor({n}, a), tb = F32Tensor({n}, b);
  Tensor out = be.Empty({n}, tensor::DType::kF32);
  be.Add(out, ta, tb);
  Vec ref;
  reference::Add(ref, Widen(a), Widen(b));
  EXPECT_LT(RelError(ToVec(out), ref), kF32Tol);

  be.AddInPlace(ta, tb);
  Vec ref_a = Widen(a);
  reference::AddInPlace(ref_a, Widen(b));
  EXPECT_LT(RelError(ToVec(ta), ref_a), kF32Tol);

  be.Scale(ta, -0.3F);
  reference::Scale(ref_a, -0.3);
  EXPECT_LT(RelError(ToVec(ta), ref_a), kF32Tol);

  // The sums widen each fp32 element exactly, so they match the reference on the same inputs to
  // double rounding.
  const Vec exact = ToVec(tb);
  EXPECT_NEAR(be.SumSquares(tb), reference::SumSquares(exact),
              1e-12 * std::max(1.0, reference::SumSquares(exact)));
  EXPECT_NEAR(be.Sum(tb), reference::Sum(exact),
              1e-12 * std::max(1.0, reference::SumSquares(exact)));
}

INSTANTIATE_TEST_SUITE_P(Sizes, ElementwiseTest, ::testing::Values(1, 3, 8191, 8193, 100003));

TEST(ElementwiseTest, SumsOfKnownValues) {
  CpuBackend be;
  Tensor t = F32Tensor({4}, {1.0F, -2.0F, 3.0F, 0.5F});
  EXPECT_DOUBLE_EQ(be.Sum(t), 2.5);
  EXPECT_DOUBLE_EQ(be.SumSquares(t), 14.25);
  Tensor empty = be.Empty({0}, tensor::DType::kF32);
  EXPECT_EQ(be.Sum(empty), 0.0);
}

}  // namespace
}  // namespace motley::backend::testing
