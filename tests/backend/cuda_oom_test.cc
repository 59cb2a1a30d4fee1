// CUDA out of device memory is a Status at the backend boundary, not an abort (issue 17): an
// allocation larger than the device leaves the tensor without memory, memory_status() returns
// kResourceExhausted naming the device and the bytes, and every later op returns without
// launching, so the caller reaches its next check. Skips without a GPU or without CUDA.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/status.h"
#if MOTLEY_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace motley {
namespace {

TEST(CudaOomTest, AllocationPastTheDeviceIsAStatusAndLaterOpsAreNoOps) {
#if !MOTLEY_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (backend::CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU visible";
  auto be = backend::CudaBackend::Create({});
  ASSERT_TRUE(be.ok()) << be.status().message();
  tensor::Backend& b = **be;
  EXPECT_TRUE(b.memory_status().ok());
  tensor::Tensor small = b.Zeros(tensor::Shape{4}, tensor::DType::kF32);
  EXPECT_TRUE(b.memory_status().ok());
  // 2^40 floats = 4 TiB: more than any GPU holds.
  tensor::Tensor huge = b.Empty(tensor::Shape{int64_t{1} << 40}, tensor::DType::kF32);
  const Status s = b.memory_status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("out of device memory: allocating 4398046511104 bytes"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s.message();
  // Later ops return without launching; reductions say NaN, copies to the host give zeros.
  b.Fill(huge, 1.0F);
  b.AddInPlace(small, small);
  EXPECT_TRUE(std::isnan(b.Sum(small)));
  std::vector<float> host(4, 7.0F);
  b.CopyToHost(host.data(), small, host.size() * sizeof(float));
  EXPECT_EQ(host, std::vector<float>(4, 0.0F));
  b.Synchronize();
  EXPECT_FALSE(b.memory_status().ok());  // sticky
#endif
}

}  // namespace
}  // namespace motley
