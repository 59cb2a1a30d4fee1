// RecordWalkOrder: every action of the lists appears once, each group's in its list's order
// (sends of a batch before its receives), every receive after the send it waits for, and a
// group's next batch only after the receives of its previous one; on 1F1B, GPipe and
// interleaved 1F1B over a range of shapes, and the store keeps the order beside the lists.
#include "sched/walk_order.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "sched/plan_schedules.h"

namespace motley::sched {
namespace {

// Key of a message: (sender's virtual stage, micro-batch, direction 0 forward / 1 backward).
using Message = std::tuple<int, int64_t, int>;

void ExpectValidOrder(const Schedule& s, const std::string& what) {
  const std::vector<WalkStep> order = RecordWalkOrder(s);
  const int p = s.num_stages;
  size_t total = 0;
  for (const auto& list : s.stages) total += list.size();
  ASSERT_EQ(order.size(), total) << what;
  // Per group, the steps are its actions: sends where its batch starts, receives where it ends.
  std::vector<std::vector<Action>> replayed(static_cast<size_t>(p));
  std::map<Message, size_t> sent_at;  // message -> position in the order
  for (size_t n = 0; n < order.size(); ++n) {
    const WalkStep& w = order[n];
    ASSERT_GE(w.group, 0) << what;
    ASSERT_LT(w.group, p) << what;
    EXPECT_EQ(w.virtual_stage % p, w.group) << what;
    replayed[static_cast<size_t>(w.group)].push_back(
        Action{w.kind, w.micro_batch, w.virtual_stage / p});
    if (w.kind == ActionKind::kSendForward) sent_at[{w.virtual_stage, w.micro_batch, 0}] = n;
    if (w.kind == ActionKind::kSendBackward) sent_at[{w.virtual_stage, w.micro_batch, 1}] = n;
    if (w.kind == ActionKind::kRecvForward) {
      auto it = sent_at.find({w.virtual_stage - 1, w.micro_batch, 0});
      ASSERT_NE(it, sent_at.end()) << what << ": RF" << w.micro_batch << " before its send";
    }
    if (w.kind == ActionKind::kRecvBackward) {
      auto it = sent_at.find({w.virtual_stage + 1, w.micro_batch, 1});
      ASSERT_NE(it, sent_at.end()) << what << ": RB" << w.micro_batch << " before its send";
    }
  }
  for (int i = 0; i < p; ++i) {
    // The group's list with each communication batch reordered sends first, receives after (in
    // list order within each kind): the order the walk posts and completes them.
    const std::vector<Action>& list = s.stages[static_cast<size_t>(i)];
    std::vector<Action> expected;
    for (size_t j = 0; j < list.size();) {
      if (!IsCommunication(list[j].kind)) {
        expected.push_back(list[j++]);
        continue;
      }
      size_t end = j;
      while (end < list.size() && IsCommunication(list[end].kind)) ++end;
      for (size_t x = j; x < end; ++x) {
        if (list[x].kind == ActionKind::kSendForward || list[x].kind == ActionKind::kSendBackward)
          expected.push_back(list[x]);
      }
      for (size_t x = j; x < end; ++x) {
        if (list[x].kind == ActionKind::kRecvForward || list[x].kind == ActionKind::kRecvBackward)
          expected.push_back(list[x]);
      }
      j = end;
    }
    EXPECT_EQ(replayed[static_cast<size_t>(i)], expected) << what << " group " << i;
  }
}

TEST(WalkOrderTest, EveryActionOnceInItsGroupsOrderAfterItsSend) {
  for (int p : {1, 2, 3, 4, 7}) {
    for (int64_t m : {1, 2, 3, 5, 8, 13}) {
      for (auto kind : {spec::PipelineSchedule::k1F1B, spec::PipelineSchedule::kGPipe}) {
        Result<Schedule> s = BuildSchedule(kind, p, m);
        ASSERT_TRUE(s.ok()) << s.status().message();
        ExpectValidOrder(*s, fmt::format("kind {} p {} m {}", static_cast<int>(kind), p, m));
      }
      for (int v : {2, 3}) {
        if (p < 2) continue;
        ScheduleOptions o;
        o.chunks = v;
        Result<Schedule> s = BuildSchedule(spec::PipelineSchedule::k1F1B, p, m, o);
        if (!s.ok()) continue;  // interleaving refuses some (p, m)
        ExpectValidOrder(*s, fmt::format("interleaved v {} p {} m {}", v, p, m));
      }
    }
  }
}

TEST(WalkOrderTest, StoredBesideTheLists) {
  auto built = StoredSchedule(spec::PipelineSchedule::k1F1B, 4, 6);
  ASSERT_TRUE(built.ok());
  const std::vector<WalkStep> order = RecordWalkOrder((*built)->schedule);
  ASSERT_EQ((*built)->walk_order.size(), order.size());
  for (size_t n = 0; n < order.size(); ++n) {
    EXPECT_EQ((*built)->walk_order[n].group, order[n].group);
    EXPECT_EQ((*built)->walk_order[n].kind, order[n].kind);
    EXPECT_EQ((*built)->walk_order[n].micro_batch, order[n].micro_batch);
  }
}

TEST(WalkOrderDeathTest, RefusesStepActions) {
  ScheduleOptions o;
  o.with_step_actions = true;
  Result<Schedule> s = BuildSchedule(spec::PipelineSchedule::k1F1B, 2, 2, o);
  ASSERT_TRUE(s.ok());
  EXPECT_DEATH(RecordWalkOrder(*s), "step action");
}

}  // namespace
}  // namespace motley::sched
