// The mpi backend under mpiexec (2 and 4 ranks): every operation against a single-rank reference,
// uneven and zero sizes, subgroups, misuse, and (in separate runs selected by --gtest_filter)
// deadlines with heartbeats and Abort. Only rank 0 prints; any rank's failure fails the run.
// Flags after the gtest ones: --deadline_floor_s=S, --silence_timeout_s=S (communicator options).
#include <csignal>
#include <cstring>

#include <unistd.h>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "comm/mpi_world.h"
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

Communicator* g_world = nullptr;

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

#define EXPECT_OK(expr)                              \
  do {                                               \
    ::motley::Status s_ = (expr);                    \
    EXPECT_TRUE(s_.ok()) << s_.message();            \
  } while (0)

TEST(MpiCollectivesTest, AllReduceSumAndMax) {
  Communicator& c = *g_world;
  for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100003}}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      Tensor t = RankInput(c.rank(), numel);
      EXPECT_OK(c.AllReduce(t, op));
      for (int64_t i = 0; i < numel; ++i) ASSERT_EQ(t.data<float>()[i], Reference(c.size(), i, op));
    }
  }
}

TEST(MpiCollectivesTest, ReduceScatterAndAllGatherUneven) {
  Communicator& c = *g_world;
  const int n = c.size();
  std::vector<int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back(r % 2 == 1 ? 0 : 3 * r + 2);
  int64_t total = 0, offset = 0;
  for (int r = 0; r < n; ++r) {
    if (r < c.rank()) offset += counts[static_cast<size_t>(r)];
    total += counts[static_cast<size_t>(r)];
  }
  const int64_t mine = counts[static_cast<size_t>(c.rank())];
  Tensor in = RankInput(c.rank(), total), out = HostTensor(Shape{mine}, DType::kF32);
  EXPECT_OK(c.ReduceScatter(out, in, counts, ReduceOp::kSum));
  for (int64_t i = 0; i < mine; ++i) EXPECT_EQ(out.data<float>()[i], Reference(n, offset + i, ReduceOp::kSum));
  Tensor part = RankInput(c.rank(), mine), all = HostTensor(Shape{total}, DType::kF32);
  EXPECT_OK(c.AllGather(all, part, counts));
  int64_t k = 0;
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i, ++k) {
      EXPECT_EQ(all.data<float>()[k], InputValue(r, i));
    }
  }
}

TEST(MpiCollectivesTest, BroadcastSendRecvBarrier) {
  Communicator& c = *g_world;
  const int n = c.size();
  for (int root = 0; root < n; ++root) {
    Tensor t = RankInput(c.rank(), 300000);  // two chunks
    EXPECT_OK(c.Broadcast(t, root));
    EXPECT_EQ(t.data<float>()[299999], InputValue(root, 299999));
  }
  const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
  Tensor a = RankInput(c.rank(), 50), got = HostTensor(Shape{50}, DType::kF32);
  auto r = c.IRecv(got, prev, 11);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_OK(c.Send(a, next, 11));
  EXPECT_OK(c.Wait(*r));
  EXPECT_EQ(got.data<float>()[49], InputValue(prev, 49));
  EXPECT_OK(c.Barrier());
}

TEST(MpiCollectivesTest, SplitIntoSubgroups) {
  Communicator& c = *g_world;
  auto sub = c.Split(c.rank() % 2, -c.rank());
  ASSERT_TRUE(sub.ok()) << sub.status().message();
  Tensor t = RankInput(c.rank(), 64);
  EXPECT_OK((*sub)->AllReduce(t, ReduceOp::kSum));
  float ref = 0.0F;
  for (int r = c.rank() % 2; r < c.size(); r += 2) ref += InputValue(r, 63);
  EXPECT_EQ(t.data<float>()[63], ref);
  auto none = c.Split(c.rank() == 0 ? 0 : kUndefinedColor, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none == nullptr, c.rank() != 0);
}

TEST(MpiCollectivesTest, MismatchedSizesReturnErrors) {
  Communicator& c = *g_world;
  Tensor t = RankInput(c.rank(), c.rank() == 0 ? 10 : 12);
  Status s = c.AllReduce(t, ReduceOp::kSum);
  ASSERT_FALSE(s.ok());
  // The ranks next to rank 0 see the mismatch; the others fail on what follows from it.
  if (c.rank() <= 1) {
    EXPECT_TRUE(Contains(s, "size mismatch in AllReduce")) << s.message();
  }
  EXPECT_TRUE(Contains(s, "AllReduce on group 'world'")) << s.message();
  EXPECT_FALSE(c.Send(t, c.size(), 0).ok());  // peer out of range
}

TEST(MpiDeadlineTest, SlowPeerIsReportedAliveAndTheWorldRecovers) {
  // Run with --deadline_floor_s=0.5: rank 1 computes for 2 s before a barrier; rank 0's receive
  // from it times out with a message naming the operation, the group and rank 1 (alive).
  Communicator& c = *g_world;
  if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(2));
  if (c.rank() == 0) {
    Tensor t = HostTensor(Shape{4}, DType::kF32);
    Status s = c.Recv(t, 1, 5);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s, "Recv on group 'world'")) << s.message();
    EXPECT_TRUE(Contains(s, "rank 1 (world rank 1)")) << s.message();
    EXPECT_TRUE(Contains(s, "alive")) << s.message();
  }
}

TEST(MpiSilenceTest, StoppedPeerIsReportedSilentBeforeTheDeadline) {
  // Run with --silence_timeout_s=1 (deadline floor stays 10 s): rank 1 stops itself with SIGSTOP,
  // so its heartbeat thread stops too. Rank 0's receive fails as "silent" (not at the deadline)
  // and rank 0 declares rank 1 lost: the world is broken for good. Rank 0 then resumes rank 1 with
  // SIGCONT; rank 1 learns it was declared lost, and a barrier fails on both, naming the loss.
  // Rank 0 alone can still talk on its survivors' communicator.
  Communicator& c = *g_world;
  Tensor pid = HostTensor(Shape{1}, DType::kI32);
  if (c.rank() == 1) {
    pid.data<int32_t>()[0] = static_cast<int32_t>(getpid());
    EXPECT_OK(c.Send(pid, 0, 1));
    raise(SIGSTOP);
  } else if (c.rank() == 0) {
    EXPECT_OK(c.Recv(pid, 1, 1));
    Tensor t = HostTensor(Shape{4}, DType::kF32);
    Status s = c.Recv(t, 1, 2);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s, "Recv on group 'world'")) << s.message();
    EXPECT_TRUE(Contains(s, "rank 1 (world rank 1) of group 'world' is silent")) << s.message();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    kill(pid.data<int32_t>()[0], SIGCONT);
    std::vector<int> lost;
    auto survivors = c.Survivors(&lost);
    ASSERT_TRUE(survivors.ok()) << survivors.status().message();
    EXPECT_EQ(lost, std::vector<int>{1});
    EXPECT_EQ((*survivors)->size(), 1);
    EXPECT_OK((*survivors)->Barrier());
  }
  const Status barrier = c.Barrier();
  ASSERT_FALSE(barrier.ok());
  EXPECT_EQ(barrier.code(), StatusCode::kUnavailable) << barrier.message();
  EXPECT_TRUE(Contains(barrier, c.rank() == 0 ? "peer lost: world rank 1 is silent"
                                              : "this rank (world rank 1) was declared lost"))
      << barrier.message();
}

TEST(MpiAbortTest, AbortReleasesWaitingRanks) {
  Communicator& c = *g_world;
  if (c.rank() == 0) {
    c.Abort("stage 0 failed");
    return;
  }
  Tensor t = RankInput(c.rank(), 1000);
  Status s = c.AllReduce(t, ReduceOp::kSum);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s, "stage 0 failed")) << s.message();
}

}  // namespace
}  // namespace motley::comm

// Other ranks print only their failures, prefixed with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
    }
  }

 private:
  int rank_;
};

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  motley::comm::CommOptions options;
  for (int i = 1; i < argc; ++i) {
    const char* flag = "--deadline_floor_s=";
    if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0) {
      options.deadline_floor_s = std::stod(argv[i] + std::strlen(flag));
    }
    const char* silence = "--silence_timeout_s=";
    if (std::strncmp(argv[i], silence, std::strlen(silence)) == 0) {
      options.silence_timeout_s = std::stod(argv[i] + std::strlen(silence));
    }
  }
  auto world = motley::comm::MpiWorld::Connect(&argc, &argv, options);
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().message().c_str());
    return 1;
  }
  motley::comm::g_world = world->get();
  if ((*world)->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter((*world)->rank()));
  }
  const int failed = RUN_ALL_TESTS();  // mpiexec fails the run when any rank exits non-zero
  world->reset();
  motley::comm::MpiWorld::Finalize();
  return failed;
}
