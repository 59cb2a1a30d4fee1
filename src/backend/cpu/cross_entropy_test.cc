// CrossEntropyForward/Backward: fp32 vs the double reference with ignored targets (< 0), large
// logits, a gpt2-sized vocabulary; reference backward vs finite differences; accumulation.
// Tolerances: see test_util.h.
#include "backend/cpu/test_util.h"

namespace motley::backend::testing {
namespace {

struct CeCase {
  int64_t N, V;
  float spread;  // logits uniform in [-spread, spread]
};
class CrossEntropyTest : public ::testing::TestWithParam<CeCase> {};

TEST_P(CrossEntropyTest, ForwardAndBackwardMatchReference) {
  const auto [N, V, spread] = GetParam();
  const auto logits = RandomFloats(N * V, 1, -spread, spread);
  auto tg = RandomIds(N, 2, static_cast<int32_t>(V));
  tg.at(0) = -1;  // ignored
  if (N > 3) tg.at(3) = -100;
  const float loss_scale = 1.0F / static_cast<float>(N);
  CpuBackend be(2);
  Tensor tl = F32Tensor({N, V}, logits), ttg = I32Tensor({N}, tg);
  Tensor losses = be.Empty({N}, tensor::DType::kF32);
  be.Fill(losses, 3.0F);
  be.CrossEntropyForward(losses, tl, ttg);
  Vec ref_losses;
  reference::CrossEntropyForward(ref_losses, Widen(logits), tg, N, V);
  EXPECT_LT(RelError(ToVec(losses), ref_losses), kF32Tol);
  EXPECT_EQ(losses.data<float>()[0], 0.0F);

  Tensor dl = be.Zeros({N, V}, tensor::DType::kF32);
  be.CrossEntropyBackward(dl, tl, ttg, loss_scale);
  Vec ref_dl(N * V, 0.0);
  reference::CrossEntropyBackward(ref_dl, Widen(logits), tg, N, V, static_cast<double>(loss_scale));
  EXPECT_LT(RelError(ToVec(dl), ref_dl), kF32Tol);
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(dl.data<float>()[j], 0.0F);  // ignored row
  be.CrossEntropyBackward(dl, tl, ttg, loss_scale);
  EXPECT_LT(RelError(ToVec(dl), Times(ref_dl, 2.0)), kF32Tol);
}

INSTANTIATE_TEST_SUITE_P(Sizes, CrossEntropyTest,
                         ::testing::Values(CeCase{1, 1, 1.0F}, CeCase{6, 13, 3.0F},
                                           CeCase{5, 257, 40.0F}, CeCase{4, 50304, 8.0F}));

TEST(CrossEntropyReferenceTest, BackwardMatchesFiniteDifferences) {
  const int64_t N = 4, V = 6;
  const double scale = 0.25;
  Vec logits = Widen(RandomFloats(N * V, 3, -2.0F, 2.0F));
  const std::vector<int32_t> tg = {2, -1, 5, 0};
  auto loss = [&] {
    Vec losses;
    reference::CrossEntropyForward(losses, logits, tg, N, V);
    double s = 0.0;
    for (double l : losses) s += l;
    return s * scale;
  };
  Vec dl(N * V, 0.0);
  reference::CrossEntropyBackward(dl, logits, tg, N, V, scale);
  EXPECT_LT(RelError(dl, FiniteDiff(loss, logits)), kFdTol);
}

TEST(CrossEntropyTest, UniformLogitsGiveLogV) {
  CpuBackend be;
  Tensor tl = F32Tensor({2, 10}, std::vector<float>(20, 0.5F));
  Tensor ttg = I32Tensor({2}, {3, 9});
  Tensor losses = be.Empty({2}, tensor::DType::kF32);
  be.CrossEntropyForward(losses, tl, ttg);
  EXPECT_NEAR(losses.data<float>()[0], std::log(10.0), 1e-6);
  EXPECT_NEAR(losses.data<float>()[1], std::log(10.0), 1e-6);
}

}  // namespace
}  // namespace motley::backend::testing
