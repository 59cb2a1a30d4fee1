// Schedules as data: exact orders for small cases, completeness and deadlock freedom over a grid
// of (p, m) and, interleaved, (p, v, m), in-flight counts, and the checker rejecting broken lists.
#include "sched/schedule.h"

#include <algorithm>

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
                               << ": " << st.message() << "\n"
                               << ScheduleToString(s);
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
        EXPECT_EQ(InFlightMicroBatches(f, i), OneFOneBInFlight(p, i, m))
            << p << " " << m << " " << i;
        EXPECT_EQ(InFlightMicroBatches(f, i),
                  InFlightWithoutInterleaving(PipelineSchedule::k1F1B, p, i, m));
        EXPECT_EQ(InFlightMicroBatches(g, i), m);
        EXPECT_EQ(InFlightMicroBatches(g, i),
                  InFlightWithoutInterleaving(PipelineSchedule::kGPipe, p, i, m));
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

Schedule Interleaved(int p, int64_t m, int v) {
  ScheduleOptions options;
  options.chunks = v;
  Result<Schedule> s = BuildSchedule(PipelineSchedule::k1F1B, p, m, options);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : Schedule{};
}

// Only the compute actions of a device, in order.
std::string ComputeLine(const Schedule& s, int stage) {
  std::string out;
  for (const Action& a : s.stages[static_cast<size_t>(stage)]) {
    if (IsCommunication(a.kind)) continue;
    out += (out.empty() ? "" : " ") + ActionToString(a);
  }
  return out;
}

// Megatron-LM's interleaved order for p = 2, v = 2, m = 4 (m a multiple of p): micro-batches in
// groups of p through chunk 0 then chunk 1; device 0 warms up 2 (p - 1) + (v - 1) p = 4
// forwards, device 1 warms up (v - 1) p = 2; backwards take the chunks in reverse.
TEST(InterleavedScheduleTest, MegatronOrderTwoDevicesTwoChunks) {
  const Schedule s = Interleaved(2, 4, 2);
  EXPECT_EQ(s.num_chunks, 2);
  EXPECT_EQ(s.num_virtual_stages(), 4);
  EXPECT_EQ(ComputeLine(s, 0), "F0 F1 F0c1 F1c1 F2 B0c1 F3 B1c1 F2c1 B0 F3c1 B1 B2c1 B3c1 B2 B3");
  EXPECT_EQ(ComputeLine(s, 1), "F0 F1 F0c1 B0c1 F1c1 B1c1 F2 B0 F3 B1 F2c1 B2c1 F3c1 B3c1 B2 B3");
  // Virtual stage 0 (device 0, chunk 0) receives nothing; the last (device 1, chunk 1) sends
  // nothing forward; device 1's chunk 0 sends its activation on to device 0's chunk 1.
  EXPECT_EQ(Line(s, 0).substr(0, 28), "F0 SF0 F1 SF1 RF0c1 F0c1 SF0");
  EXPECT_NE(Line(s, 1).find("RF0 F0 SF0 "), std::string::npos) << Line(s, 1);
  EXPECT_EQ(InFlightMicroBatches(s, 0), 5);  // warm-up + 1
  EXPECT_EQ(InFlightMicroBatches(s, 1), 3);
}

TEST(InterleavedScheduleTest, OneChunkIsPlainOneFOneB) {
  for (int p = 1; p <= 4; ++p) {
    for (int64_t m = 1; m <= 6; ++m) {
      ScheduleOptions options;
      options.chunks = 1;
      Result<Schedule> s = BuildSchedule(PipelineSchedule::k1F1B, p, m, options);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(ScheduleToString(*s), ScheduleToString(Build(PipelineSchedule::k1F1B, p, m)));
    }
  }
}

// Every accepted (p, v, m) here -- multiples of p, and every m < 2p (Megatron refuses the
// latter unless m = p) -- is complete, deadlock-free under the batched rendezvous contract, each
// device running m v forwards and backwards, with in-flight (micro-batch, chunk) pairs equal
// to the warm-up plus one (capped at m v). Every other m is refused with the nearest counts.
TEST(InterleavedScheduleTest, CompleteAndDeadlockFreeOverAGrid) {
  for (int p = 2; p <= 8; ++p) {
    for (int v = 2; v <= 4; ++v) {
      for (int64_t m = 1; m <= 17; ++m) {
        for (bool step : {false, true}) {
          ScheduleOptions options;
          options.chunks = v;
          options.with_step_actions = step;
          Result<Schedule> s = BuildSchedule(PipelineSchedule::k1F1B, p, m, options);
          if (m >= 2 * p && m % p != 0) {
            ASSERT_FALSE(s.ok()) << "p=" << p << " m=" << m;
            EXPECT_NE(s.status().message().find("runs a multiple of"), std::string::npos);
            continue;
          }
          ASSERT_TRUE(s.ok()) << s.status().message();
          const Status st = CheckSchedule(*s);
          EXPECT_TRUE(st.ok()) << "p=" << p << " v=" << v << " m=" << m << ": "
                               << st.message().substr(0, 300);
          if (step) continue;
          for (int i = 0; i < p; ++i) {
            int64_t forwards = 0;
            for (const Action& a : s->stages[static_cast<size_t>(i)]) {
              forwards += a.kind == ActionKind::kForward;
            }
            EXPECT_EQ(forwards, m * v);
            EXPECT_EQ(InFlightMicroBatches(*s, i),
                      std::min<int64_t>(m * v, InterleavedWarmup(p, i, m, v) + 1))
                << "p=" << p << " v=" << v << " m=" << m << " device " << i;
          }
        }
      }
    }
  }
}

// Narayanan et al.'s memory cost of interleaving: the first device holds
// (1 + (p - 1) / (p v)) times the activations of plain 1F1B (each chunk holds 1 / v of the
// device's blocks).
TEST(InterleavedScheduleTest, FirstDeviceHoldsNarayanansExtraActivations) {
  for (int p : {2, 4, 8}) {
    for (int v : {2, 3, 4}) {
      const int64_t m = 4 * p;
      const Schedule s = Interleaved(p, m, v);
      const double chunk_pairs = static_cast<double>(InFlightMicroBatches(s, 0));
      const double plain = static_cast<double>(OneFOneBInFlight(p, 0, m));
      EXPECT_DOUBLE_EQ(chunk_pairs / v / plain, 1.0 + (p - 1.0) / (p * v)) << p << " " << v;
    }
  }
}

TEST(InterleavedScheduleTest, RejectsChunksItCannotInterleave) {
  ScheduleOptions options;
  options.chunks = 2;
  Result<Schedule> gpipe = BuildSchedule(PipelineSchedule::kGPipe, 2, 4, options);
  ASSERT_FALSE(gpipe.ok());
  EXPECT_NE(gpipe.status().message().find("need the 1F1B schedule"), std::string::npos);
  Result<Schedule> single = BuildSchedule(PipelineSchedule::k1F1B, 1, 4, options);
  ASSERT_FALSE(single.ok());
  EXPECT_NE(single.status().message().find("at least 2 stages"), std::string::npos);
  options.chunks = 0;
  EXPECT_FALSE(BuildSchedule(PipelineSchedule::k1F1B, 2, 4, options).ok());
}

TEST(InterleavedScheduleTest, CheckerFollowsChunksAcrossTheWrap) {
  // Device 1's chunk-0 activation goes to device 0's chunk 1: a send whose chunk is changed to
  // the last virtual stage has no next stage.
  Schedule s = Interleaved(2, 2, 2);
  for (Action& a : s.stages[1]) {
    if (a.kind == ActionKind::kSendForward && a.chunk == 0 && a.micro_batch == 0) {
      a.chunk = 1;
      break;
    }
  }
  EXPECT_NE(CheckSchedule(s).message().find("the last stage has no next stage"), std::string::npos)
      << CheckSchedule(s).message();
  // Dropping one chunk's receive names it.
  s = Interleaved(2, 2, 2);
  auto& d0 = s.stages[0];
  d0.erase(std::find(d0.begin(), d0.end(), Action{ActionKind::kRecvForward, 1, 1}));
  EXPECT_NE(CheckSchedule(s).message().find("forward before its activation is received"),
            std::string::npos)
      << CheckSchedule(s).message();
  // A chunk outside [0, v).
  s = Interleaved(2, 2, 2);
  s.stages[0][0].chunk = 2;
  EXPECT_NE(CheckSchedule(s).message().find("chunk out of range [0, 2)"), std::string::npos);
}

// Buffers follow the chunk: device 0's chunk 1 receives activations from device 1 (plain 1F1B's
// first stage never does).
TEST(InterleavedScheduleTest, PipelineBuffersHeldCountTheWrappedTransfers) {
  const Schedule s = Interleaved(2, 4, 2);
  EXPECT_GE(PipelineBuffersHeld(s, 0), 2);
  EXPECT_GE(PipelineBuffersHeld(s, 1), 2);
  EXPECT_EQ(PipelineBuffersHeld(Build(PipelineSchedule::k1F1B, 2, 4), 0), 1);
}

}  // namespace
}  // namespace motley::sched
