// The double reference on hand-computed values, so that the oracle itself is anchored to known
// answers and not only to its own finite differences.
#include "backend/cpu/reference_ops.h"

#include <cmath>

#include <gtest/gtest.h>

namespace motley::backend::reference {
namespace {

TEST(ReferenceOpsTest, MatmulOfKnownValues) {
  // inp (2, 2) = [[1, 2], [3, 4]], weight (OC=1, C=2) = [[10, 1]] -> out = [[12], [34]]
  Vec out;
  MatmulForward(out, {1, 2, 3, 4}, {10, 1}, 2, 2, 1);
  EXPECT_EQ(out, (Vec{12, 34}));
  Vec dinp(4, 1.0), dw(2, 0.0);
  MatmulBackward(&dinp, &dw, {1, 2}, {1, 2, 3, 4}, {10, 1}, 2, 2, 1);
  EXPECT_EQ(dinp, (Vec{11, 2, 21, 3}));  // accumulated onto 1
  EXPECT_EQ(dw, (Vec{7, 10}));
}

TEST(ReferenceOpsTest, RmsNormOfKnownValues) {
  // x = (3, 4): mean square 12.5, rstd = 1/sqrt(12.5)
  Vec out, rstd;
  RmsNormForward(out, rstd, {3, 4}, {1, 2}, 1, 2, 0.0);
  EXPECT_DOUBLE_EQ(rstd[0], 1.0 / std::sqrt(12.5));
  EXPECT_DOUBLE_EQ(out[1], 8.0 / std::sqrt(12.5));
}

TEST(ReferenceOpsTest, RopeAtPositionZeroIsIdentity) {
  const Vec x = {1, 2, 3, 4, 5, 6, 7, 8};
  Vec out;
  RopeForward(out, x, RopeDims{1, 1, 2, 4}, 0, 10000.0);
  EXPECT_EQ(out, x);
}

TEST(ReferenceOpsTest, AttentionOfOneTokenReturnsItsValue) {
  Vec out, att;
  const AttentionDims d{1, 1, 2, 1, 2};
  AttentionForward(out, att, {1, 2, 3, 4}, {5, 6}, {7, 8}, d);
  EXPECT_EQ(out, (Vec{7, 8, 7, 8}));
  EXPECT_EQ(att, (Vec{1, 1}));
}

TEST(ReferenceOpsTest, AttentionWithEqualKeysAverages) {
  // Equal keys give equal scores: token 1 averages v0 and v1.
  Vec out, att;
  const AttentionDims d{1, 2, 1, 1, 1};
  AttentionForward(out, att, {1, 1}, {2, 2}, {4, 8}, d);
  EXPECT_EQ(att, (Vec{1, 0, 0.5, 0.5}));
  EXPECT_EQ(out, (Vec{4, 6}));
}

TEST(ReferenceOpsTest, CrossEntropyOfKnownValues) {
  Vec losses;
  CrossEntropyForward(losses, {0, std::log(3.0), 0, 0}, {1, -1}, 2, 2);
  EXPECT_NEAR(losses[0], std::log(4.0 / 3.0), 1e-15);
  EXPECT_EQ(losses[1], 0.0);
}

TEST(ReferenceOpsTest, SwiGluOfKnownValues) {
  Vec out;
  SwiGluForward(out, {0.0, 2.0}, {5.0, 3.0});
  EXPECT_EQ(out[0], 0.0);
  EXPECT_DOUBLE_EQ(out[1], 2.0 / (1.0 + std::exp(-2.0)) * 3.0);
}

TEST(ReferenceOpsTest, AdamWFirstStepIsSignedLr) {
  Vec w = {1.0}, m = {0.0}, v = {0.0};
  tensor::AdamWParams p;
  p.lr = 0.5F;
  p.eps = 0.0F;
  AdamW(w, {-3.0}, m, v, p);
  EXPECT_NEAR(w[0], 1.5, 1e-7);  // float beta1/beta2 widened to double
}

}  // namespace
}  // namespace motley::backend::reference
