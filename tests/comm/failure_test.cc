// Expected failures on the local backend return a Status with a clear message and never hang:
// misuse (mismatched sizes or operations across ranks, peer out of range, a tag used twice at
// once, bad counts, unsupported dtype, inaccessible memory), deadlines with liveness, lost peers,
// Abort, and a rank failing mid-collective. No test asserts on wall-clock time; deadlines are
// configured short only where a deadline is the behaviour under test.
#include <atomic>
#include <cstdlib>

#include <gtest/gtest.h>

#include "comm_test_util.h"

namespace motley::comm {
namespace {

using tensor::DType;
using tensor::HostTensor;
using tensor::Shape;
using tensor::Tensor;
using testing::RankInput;
using testing::RunLocal;

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

// Long enough that only the behaviour under test (not a deadline) can end a wait.
testing::RunOptions Patient() {
  testing::RunOptions o;
  o.comm.deadline_floor_s = 120.0;
  return o;
}

TEST(CommFailureTest, MismatchedSizesAcrossRanks) {
  auto results = RunLocal(2, [](Communicator& c) -> Status {
    Tensor t = RankInput(c.rank(), c.rank() == 0 ? 10 : 12);
    return c.AllReduce(t, ReduceOp::kSum);
  }, Patient());
  for (const Status& s : results) {
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s, "size mismatch in AllReduce")) << s.message();
    EXPECT_TRUE(Contains(s, "group 'world'")) << s.message();
  }
}

TEST(CommFailureTest, DifferentOperationsAcrossRanks) {
  auto results = RunLocal(3, [](Communicator& c) -> Status {
    Tensor t = RankInput(c.rank(), 9);
    if (c.rank() == 1) return c.Broadcast(t, 0);
    return c.AllReduce(t, ReduceOp::kSum);
  }, Patient());
  int mismatch = 0;
  for (const Status& s : results) {
    ASSERT_FALSE(s.ok());
    mismatch += Contains(s, "operation mismatch") ? 1 : 0;
  }
  EXPECT_GE(mismatch, 1);
}

TEST(CommFailureTest, LocalMisuseIsRejectedBeforeAnyTransfer) {
  auto results = RunLocal(2, [](Communicator& c) -> Status {
    Tensor t = RankInput(c.rank(), 8);
    Tensor out = HostTensor(Shape{4}, DType::kF32);
    Status s = c.Send(t, 2, 0);
    EXPECT_TRUE(Contains(s, "peer 2 out of range [0, 2)")) << s.message();
    s = c.Recv(t, -1, 0);
    EXPECT_TRUE(Contains(s, "peer -1 out of range")) << s.message();
    s = c.Send(t, 1 - c.rank(), kMaxUserTag + 1);
    EXPECT_TRUE(Contains(s, "tag")) << s.message();
    s = c.Broadcast(t, 7);
    EXPECT_TRUE(Contains(s, "root 7 out of range")) << s.message();
    s = c.ReduceScatter(out, t, {4, 4, 0}, ReduceOp::kSum);
    EXPECT_TRUE(Contains(s, "counts has 3 entries")) << s.message();
    s = c.ReduceScatter(out, t, {4, 5}, ReduceOp::kSum);
    EXPECT_TRUE(Contains(s, "sum(counts) = 9")) << s.message();
    s = c.AllGather(t, out, {4, 3});
    EXPECT_TRUE(Contains(s, "sum(counts) = 7")) << s.message();
    Tensor bf = HostTensor(Shape{8}, DType::kBF16);
    s = c.AllReduce(bf, ReduceOp::kSum);
    EXPECT_TRUE(Contains(s, "bf16")) << s.message();
    Tensor i32 = HostTensor(Shape{4}, DType::kI32);
    s = c.ReduceScatter(i32, t, {4, 4}, ReduceOp::kSum);
    EXPECT_TRUE(Contains(s, "dtypes differ")) << s.message();
    s = c.Split(-5, 0).status();
    EXPECT_TRUE(Contains(s, "color")) << s.message();
    // Device memory the local transport cannot touch.
    auto storage = std::make_shared<tensor::Storage>();
    storage->data = std::malloc(32);
    storage->bytes = 32;
    storage->deleter = std::free;
    storage->device = tensor::Device{tensor::DeviceKind::kCuda, 0};
    Tensor dev(storage, Shape{8}, DType::kF32);
    s = c.AllReduce(dev, ReduceOp::kSum);
    EXPECT_TRUE(Contains(s, "cannot access cuda:0 memory")) << s.message();
    // The communicator is still usable after misuse.
    return c.AllReduce(t, ReduceOp::kSum);
  }, Patient());
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.message();
}

TEST(CommFailureTest, TagUsedTwiceAtOnce) {
  auto results = RunLocal(2, [](Communicator& c) -> Status {
    Tensor t = RankInput(c.rank(), 4);
    if (c.rank() == 0) {
      MOTLEY_ASSIGN_OR_RETURN(Request first, c.ISend(t, 1, 3));
      auto second = c.ISend(t, 1, 3);
      EXPECT_FALSE(second.ok());
      EXPECT_TRUE(Contains(second.status(), "tag 3 with peer 1 is already in use"))
          << second.status().message();
      auto other_tag = c.ISend(t, 1, 4);  // a different tag is fine
      MOTLEY_RETURN_IF_ERROR(c.Wait(first));
      MOTLEY_RETURN_IF_ERROR(other_tag.status());
      MOTLEY_RETURN_IF_ERROR(c.Wait(*other_tag));
      return c.Send(t, 1, 3);  // free again after Wait
    }
    MOTLEY_ASSIGN_OR_RETURN(Request r, c.IRecv(t, 0, 3));
    EXPECT_FALSE(c.IRecv(t, 0, 3).ok());
    MOTLEY_RETURN_IF_ERROR(c.Wait(r));
    MOTLEY_RETURN_IF_ERROR(c.Recv(t, 0, 4));
    return c.Recv(t, 0, 3);
  }, Patient());
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.message();
}

TEST(CommFailureTest, DeadlineNamesOperationGroupAndSilentRank) {
  std::atomic<int> gave_up{0};
  testing::RunOptions o;
  o.comm.deadline_floor_s = 0.3;
  auto results = RunLocal(3, [&](Communicator& c) -> Status {
    if (c.rank() == 2) {  // busy outside the communicator until the others gave up
      while (gave_up < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return Status::Ok();
    }
    Status s = c.Split(0, c.rank()).status();  // rank 2 never joins
    ++gave_up;
    return s;
  }, o);
  for (int r = 0; r < 2; ++r) {
    const Status& s = results[static_cast<size_t>(r)];
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s, "Split on group 'world'")) << s.message();
  }
  // Rank 0 waits on rank 2 directly (ring predecessor): the message names it and its state.
  EXPECT_TRUE(Contains(results[0], "deadline passed waiting for rank 2 (world rank 2)"))
      << results[0].message();
  EXPECT_TRUE(Contains(results[0], "made no communicator call")) << results[0].message();
}

TEST(CommFailureTest, LostPeerFailsAtOnceNotAtTheDeadline) {
  auto results = RunLocal(2, [](Communicator& c) -> Status {
    if (c.rank() == 1) return Status::Ok();  // leaves: its communicator is destroyed
    Tensor t = RankInput(0, 4);
    return c.Recv(t, 1, 0);
  }, Patient());
  ASSERT_FALSE(results[0].ok());
  EXPECT_TRUE(Contains(results[0], "peer lost")) << results[0].message();
  EXPECT_TRUE(Contains(results[0], "world rank 1")) << results[0].message();
}

TEST(CommFailureTest, AbortReleasesEveryWaitingRank) {
  for (int n : {2, 4, 8}) {
    auto results = RunLocal(n, [](Communicator& c) -> Status {
      Tensor t = RankInput(c.rank(), 1000);
      if (c.rank() == 0) {
        c.Abort("out of memory on stage 0");
        return Status::Ok();
      }
      MOTLEY_ASSIGN_OR_RETURN(auto sub, c.Split(0, 0));  // may already see the abort
      return sub->AllReduce(t, ReduceOp::kSum);
    }, Patient());
    for (int r = 1; r < n; ++r) {
      const Status& s = results[static_cast<size_t>(r)];
      ASSERT_FALSE(s.ok());
      EXPECT_TRUE(Contains(s, "out of memory on stage 0")) << s.message();
      EXPECT_TRUE(Contains(s, "world rank 0 called Abort")) << s.message();
    }
  }
}

TEST(CommFailureTest, RankFailingMidCollectiveReleasesTheOthers) {
  // Rank 2 of 4 passes a wrong size: its neighbours fail on the mismatch, return, and the ranks
  // further along the ring see their peers leave. Every rank returns an error; none hangs.
  auto results = RunLocal(4, [](Communicator& c) -> Status {
    Tensor t = RankInput(c.rank(), c.rank() == 2 ? 1 << 16 : 1 << 17);
    MOTLEY_RETURN_IF_ERROR(c.AllReduce(t, ReduceOp::kSum));
    return c.AllReduce(t, ReduceOp::kSum);
  }, Patient());
  for (const Status& s : results) {
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s, "AllReduce on group 'world'")) << s.message();
  }
}

TEST(CommFailureTest, OperationsAfterAbortFailImmediately) {
  auto world = LocalWorld::Create(2);
  auto c0 = world->Connect(0);
  ASSERT_TRUE(c0.ok());
  EXPECT_FALSE(world->Connect(0).ok());  // twice
  EXPECT_FALSE(world->Connect(2).ok());  // out of range
  world->Abort("supervisor stop");
  Tensor t = RankInput(0, 4);
  Status s = (*c0)->AllReduce(t, ReduceOp::kSum);
  EXPECT_TRUE(Contains(s, "supervisor stop")) << s.message();
}

}  // namespace
}  // namespace motley::comm
