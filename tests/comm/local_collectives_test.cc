// Every operation of the local backend on 2, 3, 4 and 8 ranks, compared with a reference computed
// on one rank: uneven and zero sizes, non-power-of-two groups, subgroups and rebuilt groups. Each
// case runs on both paths of the backend: shared memory (the default) and the ring over
// point-to-point transfers (what link emulation uses; forced here by emulating free links).
#include <functional>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "comm_test_util.h"

namespace motley::comm {
namespace {

using tensor::DType;
using tensor::HostTensor;
using tensor::Shape;
using tensor::Tensor;
using testing::InputValue;
using testing::RankInput;
using testing::Reference;
using testing::RunLocal;

void ExpectAllOk(const std::vector<Status>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].message();
  }
}

// Uneven counts with zeros: rank r holds (r % 3 == 1) ? 0 : 2r + 1 elements.
std::vector<int64_t> UnevenCounts(int n) {
  std::vector<int64_t> c;
  for (int r = 0; r < n; ++r) c.push_back(r % 3 == 1 ? 0 : 2 * r + 1);
  return c;
}

// Param: (ranks, ring path).
class LocalCollectivesTest : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  // Shadows testing::RunLocal: on the ring path, every rank charges free links (zero latency,
  // unbounded bandwidth) to a virtual clock, which makes collectives run as rings.
  std::vector<Status> RunLocal(int n, const std::function<Status(Communicator&)>& body) {
    testing::RunOptions options;
    LinkMatrix links(n, LinkModel{});
    std::vector<VirtualClock> clocks(static_cast<size_t>(n));
    if (std::get<1>(GetParam())) {
      options.links = &links;
      options.clocks = &clocks;
    }
    return testing::RunLocal(n, body, options);
  }
};

TEST_P(LocalCollectivesTest, AllReduceSumAndMaxMatchReference) {
  const int n = std::get<0>(GetParam());
  ExpectAllOk(RunLocal(n, [n](Communicator& c) -> Status {
    EXPECT_EQ(c.size(), n);
    for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        Tensor t = RankInput(c.rank(), numel);
        MOTLEY_RETURN_IF_ERROR(c.AllReduce(t, op));
        for (int64_t i = 0; i < numel; ++i) {
          EXPECT_EQ(t.data<float>()[i], Reference(n, i, op)) << "numel " << numel << " i " << i;
        }
      }
    }
    return Status::Ok();
  }));
}

TEST_P(LocalCollectivesTest, AllReduceF64AndI32) {
  const int n = std::get<0>(GetParam());
  ExpectAllOk(RunLocal(n, [n](Communicator& c) -> Status {
    Tensor d = HostTensor(Shape{5, 3}, DType::kF64);
    Tensor i = HostTensor(Shape{13}, DType::kI32);
    for (int k = 0; k < 15; ++k) d.data<double>()[k] = 0.5 * (c.rank() + 1) + k;
    for (int k = 0; k < 13; ++k) i.data<int32_t>()[k] = c.rank() * 10 - k;
    MOTLEY_RETURN_IF_ERROR(c.AllReduce(d, ReduceOp::kSum));
    MOTLEY_RETURN_IF_ERROR(c.AllReduce(i, ReduceOp::kMax));
    for (int k = 0; k < 15; ++k) EXPECT_DOUBLE_EQ(d.data<double>()[k], 0.25 * n * (n + 1) + n * k);
    for (int k = 0; k < 13; ++k) EXPECT_EQ(i.data<int32_t>()[k], (n - 1) * 10 - k);
    return Status::Ok();
  }));
}

TEST_P(LocalCollectivesTest, ReduceScatterUnevenCountsWithZeros) {
  const int n = std::get<0>(GetParam());
  const auto counts = UnevenCounts(n);
  int64_t total = 0;
  for (int64_t x : counts) total += x;
  ExpectAllOk(RunLocal(n, [&](Communicator& c) -> Status {
    int64_t offset = 0;
    for (int r = 0; r < c.rank(); ++r) offset += counts[static_cast<size_t>(r)];
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      Tensor in = RankInput(c.rank(), total);
      Tensor out = HostTensor(Shape{counts[static_cast<size_t>(c.rank())]}, DType::kF32);
      MOTLEY_RETURN_IF_ERROR(c.ReduceScatter(out, in, counts, op));
      for (int64_t i = 0; i < out.numel(); ++i) {
        EXPECT_EQ(out.data<float>()[i], Reference(n, offset + i, op));
      }
      // The input is left unchanged.
      for (int64_t i = 0; i < total; ++i) EXPECT_EQ(in.data<float>()[i], InputValue(c.rank(), i));
    }
    return Status::Ok();
  }));
}

TEST_P(LocalCollectivesTest, AllGatherUnevenCountsWithZeros) {
  const int n = std::get<0>(GetParam());
  const auto counts = UnevenCounts(n);
  int64_t total = 0;
  for (int64_t x : counts) total += x;
  ExpectAllOk(RunLocal(n, [&](Communicator& c) -> Status {
    Tensor in = RankInput(c.rank(), counts[static_cast<size_t>(c.rank())]);
    Tensor out = HostTensor(Shape{total}, DType::kF32);
    MOTLEY_RETURN_IF_ERROR(c.AllGather(out, in, counts));
    int64_t k = 0;
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i, ++k) {
        EXPECT_EQ(out.data<float>()[k], InputValue(r, i)) << "rank " << r << " i " << i;
      }
    }
    return Status::Ok();
  }));
}

TEST_P(LocalCollectivesTest, BroadcastFromEveryRootIncludingMultiChunkAndEmpty) {
  const int n = std::get<0>(GetParam());
  ExpectAllOk(RunLocal(n, [n](Communicator& c) -> Status {
    for (int root = 0; root < n; ++root) {
      // 300k floats = 1.2 MB: two broadcast chunks.
      for (int64_t numel : {int64_t{0}, int64_t{3}, int64_t{300000}}) {
        Tensor t = RankInput(c.rank(), numel);
        MOTLEY_RETURN_IF_ERROR(c.Broadcast(t, root));
        for (int64_t i = 0; i < numel; ++i) {
          if (t.data<float>()[i] != InputValue(root, i)) {
            ADD_FAILURE() << "root " << root << " numel " << numel << " i " << i;
            break;
          }
        }
      }
    }
    return Status::Ok();
  }));
}

TEST_P(LocalCollectivesTest, TaggedSendRecvAroundTheRingAndNonBlocking) {
  const int n = std::get<0>(GetParam());
  ExpectAllOk(RunLocal(n, [n](Communicator& c) -> Status {
    const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
    // Two tags in flight at once, received in the opposite order of sending.
    Tensor a = RankInput(c.rank(), 100), b = RankInput(c.rank() + 1000, 5);
    Tensor ra = HostTensor(Shape{100}, DType::kF32), rb = HostTensor(Shape{5}, DType::kF32);
    MOTLEY_ASSIGN_OR_RETURN(Request sa, c.ISend(a, next, 1));
    MOTLEY_ASSIGN_OR_RETURN(Request sb, c.ISend(b, next, 2));
    MOTLEY_RETURN_IF_ERROR(c.Recv(rb, prev, 2));
    MOTLEY_RETURN_IF_ERROR(c.Recv(ra, prev, 1));
    MOTLEY_RETURN_IF_ERROR(c.Wait(sa));
    MOTLEY_RETURN_IF_ERROR(c.Wait(sb));
    for (int i = 0; i < 100; ++i) EXPECT_EQ(ra.data<float>()[i], InputValue(prev, i));
    for (int i = 0; i < 5; ++i) EXPECT_EQ(rb.data<float>()[i], InputValue(prev + 1000, i));
    // Same tag twice in sequence keeps order; zero-size messages work.
    Tensor empty = HostTensor(Shape{0}, DType::kF32);
    MOTLEY_ASSIGN_OR_RETURN(Request r1, c.IRecv(ra, prev, 7));
    MOTLEY_RETURN_IF_ERROR(c.Send(a, next, 7));
    MOTLEY_RETURN_IF_ERROR(c.Wait(r1));
    MOTLEY_ASSIGN_OR_RETURN(Request r2, c.IRecv(empty, prev, 7));
    MOTLEY_RETURN_IF_ERROR(c.Send(empty, next, 7));
    MOTLEY_RETURN_IF_ERROR(c.Wait(r2));
    return c.Barrier();
  }));
}

TEST_P(LocalCollectivesTest, SplitByColorAndKeyThenRebuild) {
  const int n = std::get<0>(GetParam());
  ExpectAllOk(RunLocal(n, [n](Communicator& c) -> Status {
    // Parity groups, ordered by descending world rank.
    MOTLEY_ASSIGN_OR_RETURN(auto sub, c.Split(c.rank() % 2, -c.rank()));
    if (sub == nullptr) return Err("null subgroup");
    std::vector<int> members;
    for (int r = n - 1; r >= 0; --r) {
      if (r % 2 == c.rank() % 2) members.push_back(r);
    }
    EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
    EXPECT_EQ(members[static_cast<size_t>(sub->rank())], c.rank());
    Tensor t = RankInput(c.rank(), 33);
    MOTLEY_RETURN_IF_ERROR(sub->AllReduce(t, ReduceOp::kSum));
    for (int64_t i = 0; i < 33; ++i) {
      float ref = 0.0F;
      for (int m : members) ref += InputValue(m, i);
      EXPECT_EQ(t.data<float>()[i], ref);
    }
    // Rebuild after a "plan change": only ranks < 3 join, the rest get no group.
    MOTLEY_ASSIGN_OR_RETURN(auto first3, c.Split(c.rank() < 3 ? 5 : kUndefinedColor, 0));
    EXPECT_EQ(first3 == nullptr, c.rank() >= 3);
    if (first3 != nullptr) {
      EXPECT_EQ(first3->size(), std::min(n, 3));
      Tensor u = RankInput(c.rank(), 4);
      MOTLEY_RETURN_IF_ERROR(first3->AllReduce(u, ReduceOp::kMax));
      for (int64_t i = 0; i < 4; ++i)
        EXPECT_EQ(u.data<float>()[i], Reference(std::min(n, 3), i, ReduceOp::kMax));
      // A subgroup of a subgroup.
      MOTLEY_ASSIGN_OR_RETURN(auto solo, first3->Split(first3->rank(), 0));
      EXPECT_EQ(solo->size(), 1);
      MOTLEY_RETURN_IF_ERROR(solo->AllReduce(u, ReduceOp::kSum));
    }
    // The parent still works after the splits, and the old subgroup too.
    MOTLEY_RETURN_IF_ERROR(c.Barrier());
    return sub->Barrier();
  }));
}

TEST_P(LocalCollectivesTest, LargeTensorsSpanManyChunks) {
  // Sizes of several shared-memory work chunks (kSharedChunkBytes) with ragged ends, so that
  // ranks take chunks from each other's slices.
  const int n = std::get<0>(GetParam());
  std::vector<int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back(r % 3 == 1 ? 0 : 70001 + 40000 * r);
  int64_t total = 0;
  for (int64_t x : counts) total += x;
  ExpectAllOk(RunLocal(n, [&](Communicator& c) -> Status {
    const int64_t numel = 300007;
    Tensor t = RankInput(c.rank(), numel);
    MOTLEY_RETURN_IF_ERROR(c.AllReduce(t, ReduceOp::kSum));
    for (int64_t i = 0; i < numel; ++i) {
      if (t.data<float>()[i] != Reference(n, i, ReduceOp::kSum)) {
        return Err("AllReduce: element {} is {}", i, t.data<float>()[i]);
      }
    }
    int64_t offset = 0;
    for (int r = 0; r < c.rank(); ++r) offset += counts[static_cast<size_t>(r)];
    const int64_t mine = counts[static_cast<size_t>(c.rank())];
    Tensor in = RankInput(c.rank(), total), out = HostTensor(Shape{mine}, DType::kF32);
    MOTLEY_RETURN_IF_ERROR(c.ReduceScatter(out, in, counts, ReduceOp::kMax));
    for (int64_t i = 0; i < mine; ++i) {
      if (out.data<float>()[i] != Reference(n, offset + i, ReduceOp::kMax)) {
        return Err("ReduceScatter: element {} is {}", i, out.data<float>()[i]);
      }
    }
    Tensor part = RankInput(c.rank(), mine), all = HostTensor(Shape{total}, DType::kF32);
    MOTLEY_RETURN_IF_ERROR(c.AllGather(all, part, counts));
    int64_t k = 0;
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i, ++k) {
        if (all.data<float>()[k] != InputValue(r, i)) return Err("AllGather: element {}", k);
      }
    }
    Tensor b = RankInput(c.rank(), numel);
    MOTLEY_RETURN_IF_ERROR(c.Broadcast(b, n - 1));
    for (int64_t i = 0; i < numel; ++i) {
      if (b.data<float>()[i] != InputValue(n - 1, i)) return Err("Broadcast: element {}", i);
    }
    return Status::Ok();
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalCollectivesTest,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& p) {
                           return std::to_string(std::get<0>(p.param)) +
                                  (std::get<1>(p.param) ? "_ring" : "_shared");
                         });

TEST(LocalCollectivesSingleRank, EveryOperationIsTheIdentity) {
  ExpectAllOk(RunLocal(1, [](Communicator& c) -> Status {
    Tensor t = RankInput(0, 10), out = HostTensor(Shape{10}, DType::kF32);
    MOTLEY_RETURN_IF_ERROR(c.AllReduce(t, ReduceOp::kSum));
    MOTLEY_RETURN_IF_ERROR(c.ReduceScatter(out, t, {10}, ReduceOp::kSum));
    MOTLEY_RETURN_IF_ERROR(c.AllGather(out, t, {10}));
    MOTLEY_RETURN_IF_ERROR(c.Broadcast(t, 0));
    MOTLEY_RETURN_IF_ERROR(c.Barrier());
    for (int i = 0; i < 10; ++i) EXPECT_EQ(out.data<float>()[i], InputValue(0, i));
    return Status::Ok();
  }));
}

}  // namespace
}  // namespace motley::comm
