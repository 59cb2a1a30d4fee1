// The host-side argument check that the nccl backend runs before every collective (agreement.h),
// exercised here over the local backend so that it is tested without a GPU.
#include "comm/agreement.h"

#include <gtest/gtest.h>

#include "comm_test_util.h"

namespace motley::comm {
namespace {

using testing::RunLocal;

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(AgreementTest, EqualCallsPassAndEveryRankSeesAMismatch) {
  const uint64_t meta = HashArgs({1, 2, 3});
  EXPECT_NE(meta, HashArgs({1, 2, 4}));
  auto results = RunLocal(3, [&](Communicator& c) -> Status {
    MOTLEY_RETURN_IF_ERROR(AgreeOnCall(c, "g", "AllReduce", OpKind::kAllReduce, 1000, meta));
    // Rank 2 passes another size, then another operation, then other arguments.
    Status size = AgreeOnCall(c, "g", "AllReduce", OpKind::kAllReduce,
                              c.rank() == 2 ? 999 : int64_t{1} << 40, meta);
    EXPECT_TRUE(Contains(size, c.rank() == 2 ? "size mismatch in AllReduce: rank 0 passed "
                                               "1099511627776 elements, this rank 999"
                                             : "size mismatch in AllReduce: rank 2 passed 999"))
        << size.message();
    Status kind = AgreeOnCall(c, "g", "AllReduce",
                              c.rank() == 2 ? OpKind::kBroadcast : OpKind::kAllReduce, 8, meta);
    EXPECT_TRUE(Contains(kind, "operation mismatch")) << kind.message();
    Status args = AgreeOnCall(c, "g", "Broadcast", OpKind::kBroadcast, 8,
                              c.rank() == 2 ? HashArgs({0}) : meta);
    EXPECT_TRUE(Contains(args, "argument mismatch in Broadcast")) << args.message();
    EXPECT_TRUE(Contains(args, "Broadcast on group 'g'")) << args.message();
    return Status::Ok();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.message();
}

TEST(AgreementTest, GatherCountsAreChecked) {
  tensor::Tensor full = testing::RankInput(0, 6), part = testing::RankInput(0, 2);
  EXPECT_TRUE(CheckGatherCounts("g", "AllGather", 1, 3, {2, 2, 2}, full, part).ok());
  EXPECT_TRUE(Contains(CheckGatherCounts("g", "AllGather", 1, 3, {2, 2}, full, part),
                       "counts has 2 entries, the group has 3 ranks"));
  EXPECT_TRUE(Contains(CheckGatherCounts("g", "AllGather", 1, 3, {3, 1, 2}, full, part),
                       "counts[1] = 1 but this rank's part has 2 elements"));
  EXPECT_TRUE(Contains(CheckGatherCounts("g", "AllGather", 1, 3, {3, 2, 2}, full, part),
                       "sum(counts) = 7"));
  EXPECT_TRUE(Contains(CheckGatherCounts("g", "AllGather", 1, 3, {8, -2, 0}, full, part),
                       "counts[1] = -2 < 0"));
}

}  // namespace
}  // namespace motley::comm
