// The nccl backend on real GPUs (label gpu): one rank per device, ranks as threads with a local
// host communicator carrying the NCCL unique id and the argument checks. Every test skips when no
// GPU is present (cudaGetDeviceCount fails or returns 0); with one GPU, the group has one rank.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "comm/nccl_world.h"
#include "comm_test_util.h"

namespace motley::comm {
namespace {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;
using testing::InputValue;

// A device tensor on the current CUDA device holding `values` (f32).
Tensor DeviceTensor(int device, const std::vector<float>& values) {
  auto st = std::make_shared<tensor::Storage>();
  st->bytes = std::max<size_t>(4, values.size() * sizeof(float));
  EXPECT_EQ(cudaMalloc(&st->data, st->bytes), cudaSuccess);
  st->deleter = [](void* p) { cudaFree(p); };
  st->device = tensor::Device{tensor::DeviceKind::kCuda, device};
  if (!values.empty()) {
    EXPECT_EQ(
        cudaMemcpy(st->data, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice),
        cudaSuccess);
  }
  return Tensor(st, Shape{static_cast<int64_t>(values.size())}, DType::kF32);
}

std::vector<float> ToHost(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (!out.empty()) {
    EXPECT_EQ(cudaMemcpy(out.data(), t.raw(), t.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return out;
}

std::vector<float> Inputs(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = InputValue(rank, i);
  return v;
}

// Runs body(nccl, device) on one thread per GPU (at most 4).
void RunNccl(const std::function<Status(Communicator&, int)>& body) {
  const int n = std::min(NcclWorld::DeviceCount(), 4);
  auto host_world = LocalWorld::Create(n);
  std::vector<Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto run = [&]() -> Status {
        MOTLEY_ASSIGN_OR_RETURN(auto host, host_world->Connect(r));
        MOTLEY_ASSIGN_OR_RETURN(auto nccl, NcclWorld::Connect(host.get(), r));
        EXPECT_EQ(nccl->rank(), r);
        EXPECT_EQ(nccl->size(), n);
        return body(*nccl, r);
      };
      results[static_cast<size_t>(r)] = run();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(results[static_cast<size_t>(r)].ok())
        << "rank " << r << ": " << results[static_cast<size_t>(r)].message();
  }
}

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (NcclWorld::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(NcclTest, AllReduceSumAndMaxMatchReference) {
  RunNccl([](Communicator& c, int dev) -> Status {
    for (int64_t numel : {int64_t{0}, int64_t{7}, int64_t{1} << 20}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        Tensor t = DeviceTensor(dev, Inputs(c.rank(), numel));
        MOTLEY_RETURN_IF_ERROR(c.AllReduce(t, op));
        const auto got = ToHost(t);
        for (int64_t i = 0; i < numel; ++i) {
          EXPECT_EQ(got[static_cast<size_t>(i)], testing::Reference(c.size(), i, op));
        }
      }
    }
    return Status::Ok();
  });
}

TEST_F(NcclTest, ReduceScatterAllGatherBroadcastUnevenAndEven) {
  RunNccl([](Communicator& c, int dev) -> Status {
    const int n = c.size();
    for (bool even : {true, false}) {
      std::vector<int64_t> counts;
      for (int r = 0; r < n; ++r) counts.push_back(even ? 5 : (r % 2 == 1 ? 0 : 3 * r + 2));
      int64_t total = 0, offset = 0;
      for (int r = 0; r < n; ++r) {
        if (r < c.rank()) offset += counts[static_cast<size_t>(r)];
        total += counts[static_cast<size_t>(r)];
      }
      const int64_t mine = counts[static_cast<size_t>(c.rank())];
      Tensor in = DeviceTensor(dev, Inputs(c.rank(), total));
      Tensor out = DeviceTensor(dev, std::vector<float>(static_cast<size_t>(mine)));
      MOTLEY_RETURN_IF_ERROR(c.ReduceScatter(out, in, counts, ReduceOp::kSum));
      const auto rs = ToHost(out);
      for (int64_t i = 0; i < mine; ++i) {
        EXPECT_EQ(rs[static_cast<size_t>(i)], testing::Reference(n, offset + i, ReduceOp::kSum));
      }
      Tensor part = DeviceTensor(dev, Inputs(c.rank(), mine));
      Tensor all = DeviceTensor(dev, std::vector<float>(static_cast<size_t>(total)));
      MOTLEY_RETURN_IF_ERROR(c.AllGather(all, part, counts));
      const auto ag = ToHost(all);
      size_t k = 0;
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i, ++k) {
          EXPECT_EQ(ag[k], InputValue(r, i));
        }
      }
    }
    Tensor b = DeviceTensor(dev, Inputs(c.rank(), 1000));
    MOTLEY_RETURN_IF_ERROR(c.Broadcast(b, n - 1));
    EXPECT_EQ(ToHost(b)[999], InputValue(n - 1, 999));
    return c.Barrier();
  });
}

TEST_F(NcclTest, SendRecvAroundTheRingAndSplit) {
  RunNccl([](Communicator& c, int dev) -> Status {
    const int n = c.size();
    if (n > 1) {
      const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
      Tensor mine = DeviceTensor(dev, Inputs(c.rank(), 100));
      Tensor got = DeviceTensor(dev, std::vector<float>(100));
      MOTLEY_ASSIGN_OR_RETURN(Request r, c.IRecv(got, prev, 3));
      MOTLEY_RETURN_IF_ERROR(c.Send(mine, next, 3));
      MOTLEY_RETURN_IF_ERROR(c.Wait(r));
      EXPECT_EQ(ToHost(got)[99], InputValue(prev, 99));
    }
    MOTLEY_ASSIGN_OR_RETURN(auto sub, c.Split(c.rank() % 2, c.rank()));
    Tensor t = DeviceTensor(dev, Inputs(c.rank(), 16));
    MOTLEY_RETURN_IF_ERROR(sub->AllReduce(t, ReduceOp::kSum));
    float ref = 0.0F;
    for (int r = c.rank() % 2; r < n; r += 2) ref += InputValue(r, 15);
    EXPECT_EQ(ToHost(t)[15], ref);
    return Status::Ok();
  });
}

TEST_F(NcclTest, MisuseIsRejectedBeforeNcclRuns) {
  RunNccl([](Communicator& c, int dev) -> Status {
    Tensor host = testing::RankInput(c.rank(), 4);
    Status s = c.AllReduce(host, ReduceOp::kSum);
    EXPECT_NE(s.message().find("cannot access cpu:0 memory"), std::string::npos) << s.message();
    // Mismatched sizes: every rank fails in the host check, nothing reaches NCCL.
    Tensor t = DeviceTensor(dev, Inputs(c.rank(), c.rank() == 0 ? 10 : 12));
    s = c.AllReduce(t, ReduceOp::kSum);
    if (c.size() > 1) {
      EXPECT_NE(s.message().find("size mismatch in AllReduce"), std::string::npos) << s.message();
    }
    Tensor small = DeviceTensor(dev, Inputs(c.rank(), 4));
    EXPECT_FALSE(c.Send(small, c.size(), 0).ok());
    EXPECT_FALSE(c.Broadcast(small, -1).ok());
    return c.AllReduce(small, ReduceOp::kSum);  // still usable
  });
}

}  // namespace
}  // namespace motley::comm
