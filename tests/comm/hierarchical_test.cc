// The hierarchical backend over two kinds of local ranks: kind 0 uses host tensors, kind 1 uses
// "device" tensors (cuda-tagged storage that only its own native library may touch, here a local
// world that accepts cuda memory), so every crossing between kinds must be staged through host
// memory. Hierarchical all-reduce must equal the flat one; p2p and the other collectives stage.
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "comm/hierarchical.h"
#include "comm_test_util.h"

namespace motley::comm {
namespace {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;
using testing::InputValue;

// Host memory labelled as device memory: the host transport refuses it, like real device memory.
Tensor FakeDeviceTensor(int64_t numel) {
  auto st = std::make_shared<tensor::Storage>();
  st->bytes = static_cast<size_t>(numel) * 4 + 4;
  st->data = std::calloc(1, st->bytes);
  st->deleter = std::free;
  st->device = tensor::Device{tensor::DeviceKind::kCuda, 0};
  return Tensor(st, Shape{numel}, DType::kF32);
}

class CopyStager final : public HostStager {
 public:
  Status ToHost(Tensor& host, const Tensor& device) override {
    std::memcpy(host.raw(), device.raw(), device.bytes());
    return Status::Ok();
  }
  Status FromHost(Tensor& device, const Tensor& host) override {
    std::memcpy(device.raw(), host.raw(), host.bytes());
    return Status::Ok();
  }
};

float* Raw(const Tensor& t) { return static_cast<float*>(t.raw()); }

// 6 ranks: even world ranks are kind 0 (host), odd ones kind 1 (device).
constexpr int kRanks = 6;
int KindOf(int rank) { return rank % 2; }

void RunHierarchical(const std::function<Status(HierarchicalCommunicator&, Communicator&)>& body) {
  auto flat_world = LocalWorld::Create(kRanks);
  auto host_kind = LocalWorld::Create(kRanks / 2);
  LocalWorldOptions device_opts;
  device_opts.accessible = {tensor::DeviceKind::kCuda};
  auto device_kind = LocalWorld::Create(kRanks / 2, device_opts);
  auto reference_world = LocalWorld::Create(kRanks);
  std::vector<Status> results(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      CopyStager stager;
      auto run = [&]() -> Status {
        MOTLEY_ASSIGN_OR_RETURN(auto flat, flat_world->Connect(r));
        MOTLEY_ASSIGN_OR_RETURN(auto native,
                                (KindOf(r) == 0 ? host_kind : device_kind)->Connect(r / 2));
        MOTLEY_ASSIGN_OR_RETURN(auto reference, reference_world->Connect(r));
        MOTLEY_ASSIGN_OR_RETURN(
            auto hier, HierarchicalCommunicator::Build(std::move(flat), KindOf(r),
                                                       KindOf(r) == 1 ? &stager : nullptr,
                                                       std::move(native)));
        EXPECT_EQ(hier->is_leader(), r < 2);
        return body(*hier, *reference);
      };
      results[static_cast<size_t>(r)] = run();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(results[static_cast<size_t>(r)].ok())
        << "rank " << r << ": " << results[static_cast<size_t>(r)].message();
  }
}

Tensor KindTensor(int rank, int64_t numel) {
  Tensor t = KindOf(rank) == 1 ? FakeDeviceTensor(numel)
                               : tensor::HostTensor(Shape{numel}, DType::kF32);
  for (int64_t i = 0; i < numel; ++i) Raw(t)[i] = InputValue(rank, i);
  return t;
}

TEST(HierarchicalTest, AllReduceOverTwoKindsEqualsTheFlatOne) {
  RunHierarchical([](HierarchicalCommunicator& h, Communicator& flat) -> Status {
    for (int64_t numel : {int64_t{0}, int64_t{5}, int64_t{4099}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        Tensor t = KindTensor(h.rank(), numel);
        Tensor ref = testing::RankInput(h.rank(), numel);
        MOTLEY_RETURN_IF_ERROR(h.AllReduce(t, op));
        MOTLEY_RETURN_IF_ERROR(flat.AllReduce(ref, op));
        for (int64_t i = 0; i < numel; ++i) EXPECT_EQ(Raw(t)[i], ref.data<float>()[i]);
      }
    }
    // Only the device kind's leader stages (the leaders' exchange is host transport).
    EXPECT_EQ(h.staged_bytes() > 0, h.rank() == 1);
    return Status::Ok();
  });
}

TEST(HierarchicalTest, PointToPointBetweenKindsIsStagedThroughHost) {
  RunHierarchical([](HierarchicalCommunicator& h, Communicator&) -> Status {
    // Device rank r (odd) sends to host rank r-1 and receives from it.
    const int64_t numel = 1000;
    Tensor mine = KindTensor(h.rank(), numel);
    Tensor got = KindTensor(h.rank() + 100, numel);
    const int peer = KindOf(h.rank()) == 1 ? h.rank() - 1 : h.rank() + 1;
    MOTLEY_ASSIGN_OR_RETURN(Request r, h.IRecv(got, peer, 9));
    MOTLEY_RETURN_IF_ERROR(h.Send(mine, peer, 9));
    MOTLEY_RETURN_IF_ERROR(h.Wait(r));
    for (int64_t i = 0; i < numel; ++i) EXPECT_EQ(Raw(got)[i], InputValue(peer, i));
    EXPECT_EQ(h.staged_bytes(), KindOf(h.rank()) == 1 ? 2U * 4000U : 0U);
    return Status::Ok();
  });
}

TEST(HierarchicalTest, OtherCollectivesStageAndMatchTheReference) {
  RunHierarchical([](HierarchicalCommunicator& h, Communicator&) -> Status {
    const std::vector<int64_t> counts = {3, 0, 5, 1, 2, 4};
    const int64_t total = 15;
    int64_t offset = 0;
    for (int r = 0; r < h.rank(); ++r) offset += counts[static_cast<size_t>(r)];
    const int64_t mine = counts[static_cast<size_t>(h.rank())];
    Tensor in = KindTensor(h.rank(), total);
    Tensor out = KindTensor(h.rank(), mine);
    MOTLEY_RETURN_IF_ERROR(h.ReduceScatter(out, in, counts, ReduceOp::kSum));
    for (int64_t i = 0; i < mine; ++i) {
      EXPECT_EQ(Raw(out)[i], testing::Reference(kRanks, offset + i, ReduceOp::kSum));
    }
    Tensor part = KindTensor(h.rank(), mine), all = KindTensor(h.rank(), total);
    MOTLEY_RETURN_IF_ERROR(h.AllGather(all, part, counts));
    int64_t k = 0;
    for (int r = 0; r < kRanks; ++r) {
      for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i, ++k) {
        EXPECT_EQ(Raw(all)[k], InputValue(r, i));
      }
    }
    Tensor b = KindTensor(h.rank(), 7);
    MOTLEY_RETURN_IF_ERROR(h.Broadcast(b, 3));
    for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(Raw(b)[i], InputValue(3, i));
    // A hierarchical subgroup: the first four ranks.
    MOTLEY_ASSIGN_OR_RETURN(auto sub, h.Split(h.rank() < 4 ? 0 : kUndefinedColor, h.rank()));
    if (sub != nullptr) {
      Tensor t = KindTensor(h.rank(), 9);
      MOTLEY_RETURN_IF_ERROR(sub->AllReduce(t, ReduceOp::kSum));
      for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(Raw(t)[i], testing::Reference(4, i, ReduceOp::kSum));
    }
    return h.Barrier();
  });
}

TEST(HierarchicalTest, BroadcastIsTwoLevelAndOnlyLeadersStage) {
  RunHierarchical([](HierarchicalCommunicator& h, Communicator&) -> Status {
    for (int root = 0; root < kRanks; ++root) {
      for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{3000}}) {
        Tensor t = KindTensor(h.rank() + 10 * root, numel);
        Tensor expect = testing::RankInput(root + 10 * root, numel);
        MOTLEY_RETURN_IF_ERROR(h.Broadcast(t, root));
        for (int64_t i = 0; i < numel; ++i) EXPECT_EQ(Raw(t)[i], expect.data<float>()[i]);
      }
    }
    // Device ranks other than the leader get the data from the native library, never staged.
    EXPECT_EQ(h.staged_bytes() > 0, h.rank() == 1) << "rank " << h.rank();
    Tensor small = KindTensor(h.rank(), 2);
    Status bad = h.Broadcast(small, kRanks);
    EXPECT_FALSE(bad.ok());
    EXPECT_NE(bad.message().find("root 6 out of range"), std::string::npos) << bad.message();
    return h.Barrier();
  });
}

TEST(HierarchicalTest, FlatHostTransportRefusesDeviceMemory) {
  auto world = LocalWorld::Create(1);
  auto c = world->Connect(0);
  ASSERT_TRUE(c.ok());
  Tensor t = FakeDeviceTensor(4);
  Status s = (*c)->AllReduce(t, ReduceOp::kSum);
  EXPECT_NE(s.message().find("cannot access cuda:0 memory"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace motley::comm
