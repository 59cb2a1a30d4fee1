// Schedules as data: exact orders for small cases, completeness and deadlock freedom over a grid
// of (p, m), in-flight counts, and the checker rejecting broken lists.
#include "sched/schedule.h"

#include <gtest/gtest.h>

namespace motley::sched {
namespace {

using spec::PipelineSchedule;

Schedule Build(PipelineSchedule kind, int p, int64_t m, bool step = false) {
  Result<Schedule> s = BuildSchedule(kind, p, m, ScheduleOptions{step});
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : Schedule{};
}

std::string Line(const Schedule& s, int stage) {
  std::string out;
  for (const Action& a : s.stages[static_cast<size_t>(stage)]) {
    out += (out.empty() ? "" : " ") + ActionToString(a);
  }
  return out;
}

TEST(ScheduleTest, OneFOneBOrderTwoStages) {
  const Schedule s = Build(PipelineSchedule::k1F1B, 2, 3);
  EXPECT_EQ(Line(s, 0), "F0 SF0 F1 SF1 RB0 B0 F2 SF2 RB1 B1 RB2 B2");
  EXPECT_EQ(Line(s, 1), "RF0 F0 B0 SB0 RF1 F1 B1 SB1 RF2 F2 B2 SB2");
}

TEST(ScheduleTest, OneFOneBWarmupIsStagesAheadMinusOne) {
  const Schedule s = Build(PipelineSchedule::k1F1B, 4, 8);
  // Stage 1: 2 warm-up forwards, then F2 before the first backward.
  EXPECT_EQ(Line(s, 1).substr(0, 47), "RF0 F0 SF0 RF1 F1 SF1 RF2 F2 SF2 RB0 B0 SB0 RF3");
  // Cool-down of stage 0: the last 3 backwards with no forward between.
  EXPECT_EQ(Line(s, 0).substr(Line(s, 0).size() - 23), "B4 RB5 B5 RB6 B6 RB7 B7");
}

TEST(ScheduleTest, GPipeOrder) {
  const Schedule s = Build(PipelineSchedule::kGPipe, 2, 2, true);
  EXPECT_EQ(Line(s, 0), "F0 SF0 F1 SF1 RB0 B0 RB1 B1 DP OPT");
  EXPECT_EQ(Line(s, 1), "RF0 F0 RF1 F1 B0 SB0 B1 SB1 DP OPT");
}

TEST(ScheduleTest, SingleStageHasNoCommunication) {
  EXPECT_EQ(Line(Build(PipelineSchedule::k1F1B, 1, 3), 0), "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(Line(Build(PipelineSchedule::kGPipe, 1, 2), 0), "F0 F1 B0 B1");
}

TEST(ScheduleTest, CompleteAndDeadlockFreeOverAGrid) {
  for (PipelineSchedule kind : {PipelineSchedule::k1F1B, PipelineSchedule::kGPipe}) {
    for (int p = 1; p <= 8; ++p) {
      for (int64_t m = 1; m <= 12; ++m) {  // includes m < p
        for (bool step : {false, true}) {
          const Schedule s = Build(kind, p, m, step);
          Status st = CheckSchedule(s);
          EXPECT_TRUE(st.ok()) << spec::PipelineScheduleName(kind) << " p=" << p << " m=" << m
                               << ": " << st.message() << "\n" << ScheduleToString(s);
          for (int i = 0; i < p; ++i) {
            // 2 compute actions per micro-batch, plus 2 transfers per inner boundary side.
            const size_t comm = (i > 0 ? 2 : 0) + (i < p - 1 ? 2 : 0);
            EXPECT_EQ(s.stages[static_cast<size_t>(i)].size(),
                      static_cast<size_t>(m) * (2 + comm) + (step ? 2 : 0));
          }
        }
      }
    }
  }
}

TEST(ScheduleTest, InFlightCounts) {
  for (int p = 1; p <= 6; ++p) {
    for (int64_t m = 1; m <= 9; ++m) {
      const Schedule f = Build(PipelineSchedule::k1F1B, p, m);
      const Schedule g = Build(PipelineSchedule::kGPipe, p, m);
      for (int i = 0; i < p; ++i) {
        EXPECT_EQ(InFlightMicroBatches(f, i), OneFOneBInFlight(p, i, m)) << p << " " << m << " " << i;
        EXPECT_EQ(InFlightMicroBatches(g, i), m);
      }
    }
  }
  EXPECT_EQ(OneFOneBInFlight(4, 0, 8), 4);
  EXPECT_EQ(OneFOneBInFlight(4, 3, 8), 1);
  EXPECT_EQ(OneFOneBInFlight(4, 0, 2), 2);
}

TEST(ScheduleTest, RejectsBadShapes) {
  EXPECT_FALSE(BuildSchedule(PipelineSchedule::k1F1B, 0, 4).ok());
  EXPECT_FALSE(BuildSchedule(PipelineSchedule::kGPipe, 2, 0).ok());
  Schedule s = Build(PipelineSchedule::k1F1B, 2, 2);
  s.stages.pop_back();
  EXPECT_NE(CheckSchedule(s).message().find("1 stage lists for 2 stages"), std::string::npos);
}

TEST(ScheduleTest, CheckerFindsMissingDuplicateAndMisorderedActions) {
  Schedule s = Build(PipelineSchedule::k1F1B, 2, 2);
  s.stages[1].pop_back();  // drops SB1 on stage 1
  EXPECT_EQ(CheckSchedule(s).message(), "stage 1: SB of micro-batch 1 is missing");

  s = Build(PipelineSchedule::k1F1B, 2, 2);
  s.stages[0].push_back(Action{ActionKind::kForward, 0});
  EXPECT_NE(CheckSchedule(s).message().find("stage 0 action 8 (F0): given twice"),
            std::string::npos)
      << CheckSchedule(s).message();

  s = Build(PipelineSchedule::kGPipe, 1, 2);  // F0 F1 B0 B1 -> B0 F0 F1 B1
  std::swap(s.stages[0][0], s.stages[0][2]);
  std::swap(s.stages[0][1], s.stages[0][2]);
  EXPECT_EQ(CheckSchedule(s).message(), "stage 0 action 0 (B0): backward before forward");

  s = Build(PipelineSchedule::k1F1B, 2, 1);
  s.stages[0][0] = Action{ActionKind::kRecvForward, 0};  // F0 -> RF0
  EXPECT_EQ(CheckSchedule(s).message(),
            "stage 0 action 0 (RF0): the first stage has no previous stage");

  s = Build(PipelineSchedule::k1F1B, 2, 2, true);
  std::swap(s.stages[1][s.stages[1].size() - 1], s.stages[1][s.stages[1].size() - 2]);
  EXPECT_NE(CheckSchedule(s).message().find("DP sync must follow"), std::string::npos);
}

TEST(ScheduleTest, CheckerFindsDeadlock) {
  // Complete lists whose receives come in the opposite order of the sends: stage 0 sends
  // activation 0 first (alone in its batch) while stage 1 first waits for activation 1.
  Schedule s;
  s.kind = PipelineSchedule::kGPipe;
  s.num_stages = 2;
  s.num_micro_batches = 2;
  auto A = [](ActionKind k, int64_t mb) { return Action{k, mb}; };
  using K = ActionKind;
  s.stages = {
      {A(K::kForward, 0), A(K::kSendForward, 0), A(K::kForward, 1), A(K::kSendForward, 1),
       A(K::kRecvBackward, 0), A(K::kBackward, 0), A(K::kRecvBackward, 1), A(K::kBackward, 1)},
      {A(K::kRecvForward, 1), A(K::kForward, 1), A(K::kRecvForward, 0), A(K::kForward, 0),
       A(K::kBackward, 0), A(K::kSendBackward, 0), A(K::kBackward, 1), A(K::kSendBackward, 1)},
  };
  const std::string m = CheckSchedule(s).message();
  EXPECT_NE(m.find("schedule deadlocks"), std::string::npos) << m;
  EXPECT_NE(m.find("stage 0 at action 1 waits on SF0"), std::string::npos) << m;
  EXPECT_NE(m.find("stage 1 at action 0 waits on RF1"), std::string::npos) << m;
  // Posting both sends in one batch lets them meet: no deadlock.
  std::swap(s.stages[0][1], s.stages[0][2]);  // F0 F1 SF0 SF1 ...
  EXPECT_TRUE(CheckSchedule(s).ok()) << CheckSchedule(s).message();
}

// Transfer buffers by hand from the lists (p = 3, m = 4; `motley schedule -p 3 -m 4`): a batch
// that receives while it sends a gradient holds both until it completes ("SB0 RB1" on the middle
// stage; "SB0 RF1" on 1F1B's last stage, whose GPipe list sends SB0 alone); the first stage
// holds one received gradient at a time.
TEST(ScheduleTest, PipelineBuffersHeldFollowTheExecutorsPool) {
  const Schedule one = Build(PipelineSchedule::k1F1B, 3, 4);
  EXPECT_EQ(PipelineBuffersHeld(one, 0), 1);
  EXPECT_EQ(PipelineBuffersHeld(one, 1), 2);
  EXPECT_EQ(PipelineBuffersHeld(one, 2), 2);
  const Schedule gpipe = Build(PipelineSchedule::kGPipe, 3, 4);
  EXPECT_EQ(PipelineBuffersHeld(gpipe, 0), 1);
  EXPECT_EQ(PipelineBuffersHeld(gpipe, 1), 2);
  EXPECT_EQ(PipelineBuffersHeld(gpipe, 2), 1);
  EXPECT_EQ(PipelineBuffersHeld(Build(PipelineSchedule::k1F1B, 1, 4), 0), 0);
}

}  // namespace
}  // namespace motley::sched
