// AttentionForward/Backward: fp32 vs the double reference (plain and grouped-query heads, T = 1,
// odd sizes), reference backward vs finite differences, accumulation, causality.
// Tolerances: see test_util.h.
#include "backend/cpu/test_util.h"

namespace motley::backend::testing {
namespace {

using reference::AttentionDims;

class AttentionTest : public ::testing::TestWithParam<AttentionDims> {};

TEST_P(AttentionTest, ForwardAndBackwardMatchReference) {
  const AttentionDims d = GetParam();
  const int64_t nq = d.B * d.T * d.NH * d.HS, nk = d.B * d.T * d.NKV * d.HS;
  const auto q = RandomFloats(nq, 1), k = RandomFloats(nk, 2), v = RandomFloats(nk, 3);
  const auto g = RandomFloats(nq, 4);
  CpuBackend be(2);
  Tensor tq = F32Tensor({d.B, d.T, d.NH, d.HS}, q), tk = F32Tensor({d.B, d.T, d.NKV, d.HS}, k);
  Tensor tv = F32Tensor({d.B, d.T, d.NKV, d.HS}, v), tg = F32Tensor({d.B, d.T, d.NH, d.HS}, g);
  Tensor out = be.Empty(tq.shape(), tensor::DType::kF32);
  Tensor att = be.Empty({d.B, d.NH, d.T, d.T}, tensor::DType::kF32);
  be.Fill(att, 5.0F);  // every entry, above the diagonal too, must be overwritten
  be.AttentionForward(out, att, tq, tk, tv);
  Vec ref_out, ref_att;
  reference::AttentionForward(ref_out, ref_att, Widen(q), Widen(k), Widen(v), d);
  EXPECT_LT(RelError(ToVec(out), ref_out), kF32Tol);
  EXPECT_LT(RelError(ToVec(att), ref_att), kF32Tol);

  Tensor dq = be.Zeros(tq.shape(), tensor::DType::kF32);
  Tensor dk = be.Zeros(tk.shape(), tensor::DType::kF32);
  Tensor dv = be.Zeros(tv.shape(), tensor::DType::kF32);
  be.AttentionBackward(dq, dk, dv, tg, tq, tk, tv, att);
  Vec ref_dq(nq, 0.0), ref_dk(nk, 0.0), ref_dv(nk, 0.0);
  reference::AttentionBackward(ref_dq, ref_dk, ref_dv, Widen(g), Widen(q), Widen(k), Widen(v),
                               ToVec(att), d);
  EXPECT_LT(RelError(ToVec(dq), ref_dq), kF32Tol);
  EXPECT_LT(RelError(ToVec(dk), ref_dk), kF32Tol);
  EXPECT_LT(RelError(ToVec(dv), ref_dv), kF32Tol);
  be.AttentionBackward(dq, dk, dv, tg, tq, tk, tv, att);
  EXPECT_LT(RelError(ToVec(dq), Times(ref_dq, 2.0)), kF32Tol);
  EXPECT_LT(RelError(ToVec(dk), Times(ref_dk, 2.0)), kF32Tol);
  EXPECT_LT(RelError(ToVec(dv), Times(ref_dv, 2.0)), kF32Tol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(AttentionDims{1, 1, 1, 1, 4},      // T = 1
                                           AttentionDims{2, 5, 4, 2, 6},      // GQA, odd T
                                           AttentionDims{1, 17, 4, 4, 12},    // T > one block
                                           AttentionDims{2, 33, 4, 1, 10},    // multi-query
                                           AttentionDims{1, 64, 2, 2, 64}));  // gpt2-like head

TEST(AttentionReferenceTest, BackwardMatchesFiniteDifferences) {
  const AttentionDims d{2, 4, 4, 2, 3};  // GQA: heads 0,1 -> kv 0; heads 2,3 -> kv 1
  const int64_t nq = d.B * d.T * d.NH * d.HS, nk = d.B * d.T * d.NKV * d.HS;
  Vec q = Widen(RandomFloats(nq, 5)), k = Widen(RandomFloats(nk, 6)),
      v = Widen(RandomFloats(nk, 7));
  const Vec proj = Widen(RandomFloats(nq, 8));
  auto loss = [&] {
    Vec out, att;
    reference::AttentionForward(out, att, q, k, v, d);
    return Dot(out, proj);
  };
  Vec out, att;
  reference::AttentionForward(out, att, q, k, v, d);
  Vec dq(nq, 0.0), dk(nk, 0.0), dv(nk, 0.0);
  reference::AttentionBackward(dq, dk, dv, proj, q, k, v, att, d);
  EXPECT_LT(RelError(dq, FiniteDiff(loss, q)), kFdTol);
  EXPECT_LT(RelError(dk, FiniteDiff(loss, k)), kFdTol);
  EXPECT_LT(RelError(dv, FiniteDiff(loss, v)), kFdTol);
}

TEST(AttentionTest, IsCausal) {
  // Changing the last token's k and v leaves every earlier output unchanged.
  // B=1, T=6, NH=2, NKV=1, HS=4
  auto q = RandomFloats(48, 9), k = RandomFloats(24, 10), v = RandomFloats(24, 11);
  CpuBackend be;
  auto run = [&](const std::vector<float>& kk, const std::vector<float>& vv) {
    Tensor out = be.Empty({1, 6, 2, 4}, tensor::DType::kF32);
    Tensor att = be.Empty({1, 2, 6, 6}, tensor::DType::kF32);
    be.AttentionForward(out, att, F32Tensor({1, 6, 2, 4}, q), F32Tensor({1, 6, 1, 4}, kk),
                        F32Tensor({1, 6, 1, 4}, vv));
    return Floats(out);
  };
  const auto before = run(k, v);
  for (int i = 20; i < 24; ++i)
    k[static_cast<size_t>(i)] += 1.0F, v[static_cast<size_t>(i)] -= 1.0F;
  const auto after = run(k, v);
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(before[i], after[i]) << i;
  bool last_changed = false;
  for (size_t i = 40; i < 48; ++i) last_changed |= before[i] != after[i];
  EXPECT_TRUE(last_changed);
}

}  // namespace
}  // namespace motley::backend::testing
