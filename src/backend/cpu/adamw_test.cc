// AdamW: fp32 vs the double reference over several steps, decoupled weight decay, bias correction,
// and the folded gradient scale (grad_scale) against pre-scaled gradients.
// Tolerances: see test_util.h.
#include "backend/cpu/test_util.h"

namespace motley::backend::testing {
namespace {

TEST(AdamWTest, MatchesReferenceOverSteps) {
  const int64_t n = 40001;
  tensor::AdamWParams p;
  p.lr = 1e-2F;
  p.weight_decay = 0.1F;
  CpuBackend be(2);
  const auto w0 = RandomFloats(n, 1);
  Tensor w = F32Tensor({n}, w0), m = be.Zeros({n}, tensor::DType::kF32);
  Tensor v = be.Zeros({n}, tensor::DType::kF32);
  Vec rw = Widen(w0), rm(n, 0.0), rv(n, 0.0);
  for (int64_t step = 1; step <= 5; ++step) {
    const auto g = RandomFloats(n, static_cast<uint32_t>(10 + step));
    p.step = step;
    be.AdamW(w, F32Tensor({n}, g), m, v, p);
    reference::AdamW(rw, Widen(g), rm, rv, p);
  }
  EXPECT_LT(RelError(ToVec(w), rw), kF32Tol);
  EXPECT_LT(RelError(ToVec(m), rm), kF32Tol);
  EXPECT_LT(RelError(ToVec(v), rv), kF32Tol);
}

TEST(AdamWTest, FirstStepMovesByLrAndDecayIsDecoupled) {
  // Step 1: mh = g, vh = g^2, so the update is lr * (sign(g) + wd * w) up to eps.
  // With g = 0 only the decoupled decay acts: w -= lr * wd * w.
  CpuBackend be;
  tensor::AdamWParams p;
  p.lr = 0.1F;
  p.weight_decay = 0.5F;
  p.eps = 1e-30F;  // tiny but nonzero: g = 0 would give 0/0 with eps = 0
  Tensor w = F32Tensor({3}, {1.0F, 2.0F, -1.0F});
  Tensor g = F32Tensor({3}, {0.3F, -4.0F, 0.0F});
  Tensor m = be.Zeros({3}, tensor::DType::kF32), v = be.Zeros({3}, tensor::DType::kF32);
  be.AdamW(w, g, m, v, p);
  EXPECT_NEAR(w.data<float>()[0], 1.0 - 0.1 * (1.0 + 0.5 * 1.0), 1e-6);
  EXPECT_NEAR(w.data<float>()[1], 2.0 - 0.1 * (-1.0 + 0.5 * 2.0), 1e-6);
  EXPECT_NEAR(w.data<float>()[2], -1.0 - 0.1 * (0.5 * -1.0), 1e-6);
}

// grad_scale s acts as if the gradient had been multiplied by s first (bitwise, as g * s is the
// same float product either way), on 2 threads and an odd size, and leaves grad untouched; the
// reference agrees.
TEST(AdamWTest, GradScaleEqualsPrescaledGradient) {
  const int64_t n = 40001;
  const float s = 0.37F;
  CpuBackend be(2);
  const auto w0 = RandomFloats(n, 5);
  const auto g = RandomFloats(n, 6);
  std::vector<float> g_scaled(g);
  for (float& x : g_scaled) x *= s;
  tensor::AdamWParams p;
  p.lr = 1e-2F;
  p.weight_decay = 0.1F;
  p.step = 2;
  Tensor w1 = F32Tensor({n}, w0), w2 = F32Tensor({n}, w0);
  Tensor m1 = F32Tensor({n}, RandomFloats(n, 7)), m2 = F32Tensor({n}, RandomFloats(n, 7));
  Tensor v1 = be.Zeros({n}, tensor::DType::kF32), v2 = be.Zeros({n}, tensor::DType::kF32);
  Tensor grad = F32Tensor({n}, g);
  be.AdamW(w1, F32Tensor({n}, g_scaled), m1, v1, p);
  p.grad_scale = s;
  be.AdamW(w2, grad, m2, v2, p);
  EXPECT_EQ(ToVec(w1), ToVec(w2));
  EXPECT_EQ(ToVec(m1), ToVec(m2));
  EXPECT_EQ(ToVec(v1), ToVec(v2));
  EXPECT_EQ(ToVec(grad), Widen(g));  // grad itself is not scaled

  Vec rw = Widen(w0), rm = Widen(RandomFloats(n, 7)), rv(n, 0.0);
  reference::AdamW(rw, Widen(g), rm, rv, p);
  EXPECT_LT(RelError(ToVec(w2), rw), kF32Tol);
  EXPECT_LT(RelError(ToVec(m2), rm), kF32Tol);
}

}  // namespace
}  // namespace motley::backend::testing
