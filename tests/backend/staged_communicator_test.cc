// train::StagedCommunicator without a GPU: a fake "device" backend whose tensors are host memory
// marked as CUDA memory (not host-addressable) stands in for a CudaBackend, so the staging paths
// (point-to-point, non-blocking, collectives, split groups) run here. The local world refuses
// device tensors, so each case passes only if every device tensor was staged.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "comm/local_world.h"
#include "train/staged_communicator.h"

namespace motley::train {
namespace {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

// Host memory that claims to be on cuda:0: only Empty/Zeros and the copies are used by staging.
class FakeDeviceBackend final : public tensor::Backend {
 public:
  tensor::Device device() const override { return {tensor::DeviceKind::kCuda, 0}; }
  std::string name() const override { return "fake-cuda"; }
  Tensor Empty(Shape shape, DType dtype) override {
    auto st = std::make_shared<tensor::Storage>();
    st->bytes = static_cast<size_t>(shape.numel()) * tensor::DTypeSize(dtype);
    st->data = std::calloc(st->bytes + 1, 1);
    st->deleter = &std::free;
    st->device = device();
    return Tensor(std::move(st), shape, dtype);
  }
  Tensor Zeros(Shape shape, DType dtype) override { return Empty(shape, dtype); }
  void SetZero(Tensor& t) override { std::memset(t.raw(), 0, t.bytes()); }
  void Fill(Tensor&, float) override { Unused(); }
  void CopyFromHost(Tensor& dst, const void* src, size_t bytes) override {
    ASSERT_EQ(bytes, dst.bytes());
    std::memcpy(dst.raw(), src, bytes);
  }
  void CopyToHost(void* dst, const Tensor& src, size_t bytes) override {
    ASSERT_EQ(bytes, src.bytes());
    std::memcpy(dst, src.raw(), bytes);
  }
  void Copy(Tensor&, const Tensor&) override { Unused(); }
  void MatmulForward(Tensor&, const Tensor&, const Tensor&) override { Unused(); }
  void MatmulBackward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) override {
    Unused();
  }
  void EmbeddingForward(Tensor&, const Tensor&, const Tensor&) override { Unused(); }
  void EmbeddingBackward(Tensor&, const Tensor&, const Tensor&) override { Unused(); }
  void RmsNormForward(Tensor&, Tensor&, const Tensor&, const Tensor&, float) override { Unused(); }
  void RmsNormBackward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&) override {
    Unused();
  }
  void RopeForward(Tensor&, const Tensor&, int64_t, float) override { Unused(); }
  void RopeBackward(Tensor&, const Tensor&, int64_t, float) override { Unused(); }
  void AttentionForward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) override {
    Unused();
  }
  void AttentionBackward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&) override {
    Unused();
  }
  void SwiGluForward(Tensor&, const Tensor&, const Tensor&) override { Unused(); }
  void SwiGluBackward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) override {
    Unused();
  }
  void CrossEntropyForward(Tensor&, const Tensor&, const Tensor&) override { Unused(); }
  void CrossEntropyBackward(Tensor&, const Tensor&, const Tensor&, float) override { Unused(); }
  void Add(Tensor&, const Tensor&, const Tensor&) override { Unused(); }
  void AddInPlace(Tensor&, const Tensor&) override { Unused(); }
  void Scale(Tensor&, float) override { Unused(); }
  double SumSquares(const Tensor&) override { return Unused(), 0.0; }
  double Sum(const Tensor&) override { return Unused(), 0.0; }
  void AdamW(Tensor&, const Tensor&, Tensor&, Tensor&, const tensor::AdamWParams&) override {
    Unused();
  }

 private:
  static void Unused() { ADD_FAILURE() << "op not expected in a staging test"; }
};

// A "device" tensor of n floats base, base + 1, ...
Tensor DeviceFloats(FakeDeviceBackend& be, int64_t n, float base) {
  Tensor t = be.Empty(Shape{n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) static_cast<float*>(t.raw())[i] = base + static_cast<float>(i);
  return t;
}

float At(const Tensor& t, int64_t i) {
  return static_cast<const float*>(t.raw())[i];
}

// Two ranks as threads: rank 0 staged over a fake device, rank 1 plain host.
void RunPair(const std::function<void(comm::Communicator&, FakeDeviceBackend*)>& body) {
  auto world = comm::LocalWorld::Create(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto host = world->Connect(r);
      ASSERT_TRUE(host.ok()) << host.status().message();
      if (r == 1) {
        body(**host, nullptr);
        return;
      }
      FakeDeviceBackend be;
      StagedCommunicator staged(**host, be);
      body(staged, &be);
      EXPECT_GT(staged.staged_bytes(), 0U);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(StagedCommunicatorTest, LocalWorldRefusesUnstagedDeviceTensors) {
  auto world = comm::LocalWorld::Create(1);
  auto host = world->Connect(0);
  ASSERT_TRUE(host.ok());
  FakeDeviceBackend be;
  Tensor t = DeviceFloats(be, 4, 1.0F);
  EXPECT_FALSE((*host)->AllReduce(t, comm::ReduceOp::kSum).ok())
      << "the premise of these tests: device tensors need staging";
}

TEST(StagedCommunicatorTest, PointToPointBothWaysAndNonBlocking) {
  RunPair([](comm::Communicator& c, FakeDeviceBackend* be) {
    const int64_t n = 1000;
    if (be != nullptr) {  // device side
      Tensor out = DeviceFloats(*be, n, 10.0F);
      ASSERT_TRUE(c.Send(out, 1, 7).ok());
      Tensor in = be->Empty(Shape{n}, DType::kF32);
      ASSERT_TRUE(c.Recv(in, 1, 8).ok());
      EXPECT_EQ(At(in, 0), 20.0F);
      EXPECT_EQ(At(in, n - 1), 20.0F + static_cast<float>(n - 1));
      auto rs = c.ISend(out, 1, 9);
      Tensor in2 = be->Empty(Shape{n}, DType::kF32);
      auto rr = c.IRecv(in2, 1, 10);
      ASSERT_TRUE(rs.ok() && rr.ok());
      ASSERT_TRUE(c.Wait(*rs).ok());
      ASSERT_TRUE(c.Wait(*rr).ok());
      EXPECT_EQ(At(in2, 5), 35.0F);  // copied back into "device" memory at Wait
    } else {                         // host side
      Tensor in = tensor::HostTensor(Shape{n}, DType::kF32);
      ASSERT_TRUE(c.Recv(in, 0, 7).ok());
      EXPECT_EQ(in.data<float>()[3], 13.0F);
      Tensor out = tensor::HostTensor(Shape{n}, DType::kF32);
      for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = 20.0F + static_cast<float>(i);
      ASSERT_TRUE(c.Send(out, 0, 8).ok());
      Tensor in2 = tensor::HostTensor(Shape{n}, DType::kF32);
      ASSERT_TRUE(c.Recv(in2, 0, 9).ok());
      EXPECT_EQ(in2.data<float>()[n - 1], 10.0F + static_cast<float>(n - 1));
      for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = 30.0F + static_cast<float>(i);
      ASSERT_TRUE(c.Send(out, 0, 10).ok());
    }
  });
}

TEST(StagedCommunicatorTest, CollectivesAndSplitGroupsStage) {
  RunPair([](comm::Communicator& c, FakeDeviceBackend* be) {
    const int64_t n = 6;
    auto make = [&](float base) {
      if (be != nullptr) return DeviceFloats(*be, n, base);
      Tensor t = tensor::HostTensor(Shape{n}, DType::kF32);
      for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = base + static_cast<float>(i);
      return t;
    };
    Tensor a = make(c.rank() == 0 ? 1.0F : 100.0F);
    ASSERT_TRUE(c.AllReduce(a, comm::ReduceOp::kSum).ok());
    EXPECT_EQ(At(a, 2), 1.0F + 100.0F + 4.0F);
    Tensor b = make(c.rank() == 0 ? 5.0F : -1.0F);
    ASSERT_TRUE(c.Broadcast(b, 1).ok());
    EXPECT_EQ(At(b, 0), -1.0F);
    Tensor mine = make(static_cast<float>(c.rank()) * 10.0F);
    Tensor all = be != nullptr ? be->Empty(Shape{2 * n}, DType::kF32)
                               : tensor::HostTensor(Shape{2 * n}, DType::kF32);
    ASSERT_TRUE(c.AllGather(all, mine, {n, n}).ok());
    EXPECT_EQ(At(all, n + 1), 11.0F);
    Tensor part = be != nullptr ? be->Empty(Shape{3}, DType::kF32)
                                : tensor::HostTensor(Shape{3}, DType::kF32);
    ASSERT_TRUE(c.ReduceScatter(part, make(1.0F), {3, 3}, comm::ReduceOp::kSum).ok());
    EXPECT_EQ(At(part, 0), 2.0F * (1.0F + static_cast<float>(3 * c.rank())));
    auto group = c.Split(0, c.rank());
    ASSERT_TRUE(group.ok() && *group != nullptr);
    Tensor g = make(2.0F);
    ASSERT_TRUE((*group)->AllReduce(g, comm::ReduceOp::kMax).ok());
    EXPECT_EQ(At(g, 1), 3.0F);
  });
}

}  // namespace
}  // namespace motley::train
