// Tests for Shape and Tensor value semantics.
#include "tensor/tensor.h"

#include <gtest/gtest.h>

namespace motley::tensor {
namespace {

TEST(ShapeTest, NumelAndString) {
  Shape s{4, 64, 768};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 4 * 64 * 768);
  EXPECT_EQ(s.str(), "(4, 64, 768)");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_TRUE((Shape{2, 3} == Shape{2, 3}));
  EXPECT_FALSE((Shape{2, 3} == Shape{3, 2}));
}

TEST(TensorTest, HostTensorIsZeroedAndAliasesOnCopy) {
  Tensor t = HostTensor(Shape{2, 3}, DType::kF32);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<float>()[i], 0.0F);
  Tensor alias = t;
  alias.data<float>()[4] = 2.5F;
  EXPECT_EQ(t.data<float>()[4], 2.5F);
  Tensor r = t.Reshaped(Shape{6});
  EXPECT_EQ(r.data<float>()[4], 2.5F);
  EXPECT_EQ(t.bytes(), 24U);
}

TEST(TensorDeathTest, WrongDtypeAborts) {
  Tensor t = HostTensor(Shape{2}, DType::kF32);
  EXPECT_DEATH((void)t.data<int32_t>(), "wrong dtype");
}

}  // namespace
}  // namespace motley::tensor
