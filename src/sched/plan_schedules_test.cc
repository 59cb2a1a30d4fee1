// PlanSchedules: one schedule per distinct (stages, micro-batches, chunks), shared across plans,
// each pipeline given the list and counts BuildSchedule's list gives, and BuildSchedule's refusal
// passed on.
#include "sched/plan_schedules.h"

#include <gtest/gtest.h>

#include "spec/plan_test_util.h"

namespace motley::sched {
namespace {

using spec::test_util::Stage;

spec::PipelinePlan Pipe(std::vector<spec::StagePlan> stages, int64_t m) {
  spec::PipelinePlan p;
  p.stages = std::move(stages);
  p.micro_batches = m;
  p.micro_batch_size = 1;
  return p;
}

TEST(PlanSchedulesTest, OneSchedulePerDistinctShape) {
  spec::Plan plan;
  plan.pipelines = {Pipe({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 4),
                    Pipe({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})}, 4),
                    Pipe({Stage(0, 2, true, false, {4}), Stage(2, 2, false, true, {5})}, 3),
                    Pipe({Stage(0, 4, true, true, {6})}, 4)};
  Result<PlanSchedules> s = PlanSchedules::Build(plan);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(&s->of(0), &s->of(1));
  EXPECT_NE(&s->of(0), &s->of(2));
  EXPECT_NE(&s->of(0), &s->of(3));
  // The store: a second plan with the same shapes reads the same lists.
  Result<PlanSchedules> again = PlanSchedules::Build(plan);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(&again->of(2), &s->of(2));
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    Result<Schedule> alone = BuildSchedule(plan.schedule, plan.pipelines[k].num_stages(),
                                           plan.pipelines[k].micro_batches);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(s->of(k).stages, alone->stages) << "pipeline " << k;
    for (size_t i = 0; i < alone->stages.size(); ++i) {
      EXPECT_EQ(s->in_flight(k, i), InFlightMicroBatches(*alone, static_cast<int>(i)));
      EXPECT_EQ(s->buffers_held(k, i), PipelineBuffersHeld(*alone, static_cast<int>(i)));
    }
  }
}

// An interleaved pipeline (2 device groups, 2 chunks: 4 virtual stages) gets the interleaved
// lists of its 2 groups, not 1F1B over 4 stages nor over 2, and a plain replica of the same
// group count and micro-batches keeps its own.
TEST(PlanSchedulesTest, InterleavedPipelinesGetTheirChunks) {
  spec::Plan plan;
  spec::PipelinePlan interleaved =
      Pipe({Stage(0, 1, true, false, {0}), Stage(1, 1, false, false, {1}),
            Stage(2, 1, false, false, {0}), Stage(3, 1, false, true, {1})},
           4);
  interleaved.chunks = 2;
  plan.pipelines = {interleaved,
                    Pipe({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})}, 4)};
  Result<PlanSchedules> s = PlanSchedules::Build(plan);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ScheduleOptions two_chunks;
  two_chunks.chunks = 2;
  Result<Schedule> alone = BuildSchedule(plan.schedule, 2, 4, two_chunks);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(s->of(0).num_chunks, 2);
  EXPECT_EQ(s->of(0).stages, alone->stages);
  // Per virtual stage c * p + i: chunk c's micro-batches on group i; the chunks together hold
  // the group's in-flight pairs at most.
  for (int i = 0; i < 2; ++i) {
    int64_t chunks_sum = 0;
    for (int c = 0; c < 2; ++c) {
      const int64_t mine = s->in_flight(0, static_cast<size_t>(c * 2 + i));
      EXPECT_EQ(mine, InFlightMicroBatches(*alone, i, c));
      EXPECT_GE(mine, 1);
      chunks_sum += mine;
    }
    EXPECT_GE(chunks_sum, InFlightMicroBatches(*alone, i));
    EXPECT_EQ(s->buffers_held(0, static_cast<size_t>(i)), PipelineBuffersHeld(*alone, i));
  }
  EXPECT_EQ(s->of(1).num_chunks, 1);
  EXPECT_EQ(s->of(1).stages, BuildSchedule(plan.schedule, 2, 4)->stages);
}

TEST(PlanSchedulesTest, PassesOnTheScheduleError) {
  spec::Plan plan;
  plan.pipelines = {Pipe({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 0)};
  Result<PlanSchedules> s = PlanSchedules::Build(plan);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), BuildSchedule(plan.schedule, 2, 0).status().message());
}

}  // namespace
}  // namespace motley::sched
