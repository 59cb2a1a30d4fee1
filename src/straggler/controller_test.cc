// Re-plan controller: a straggler's plan change pays for itself, healthy rates change nothing, a
// very slow device is dropped and rejoins, and the background re-plan is decided at a fixed
// boundary.
#include "straggler/controller.h"

#include <gtest/gtest.h>

#include "straggler/test_util.h"

namespace motley::straggler {
namespace {

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = testing::LoadWorld();
    initial_ = world_->initial;
  }
  const perf::Predictor& predictor() const { return *world_->predictor; }
  ControllerOptions Options() const {
    ControllerOptions o;
    o.planner = world_->planner;
    return o;
  }
  static perf::StragglerRates Rates(int device, double rate) {
    perf::StragglerRates r(8, 1.0);
    r[static_cast<size_t>(device)] = rate;
    return r;
  }
  std::unique_ptr<testing::World> world_;
  spec::Plan initial_;
};

TEST_F(ControllerTest, AStragglerMakesAFasterPlanWorthItsMigration) {
  auto d = DecideReplan(predictor(), initial_, initial_, Rates(5, 3.0), {}, Options());
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(d->adopted) << d->candidate;
  EXPECT_LT(d->new_iteration_s, 0.9 * d->current_iteration_s);
  EXPECT_GT(d->gain_s, d->migration_s);
  EXPECT_GT(d->moved_bytes, 0.0);
  EXPECT_FALSE(SamePlan(d->plan, initial_));
  EXPECT_TRUE(
      spec::ValidatePlan(d->plan, world_->run.cluster, world_->run.model, world_->run.train).ok());
  // Healthy rates: nothing to gain, the running plan stays.
  auto h =
      DecideReplan(predictor(), initial_, initial_, perf::StragglerRates(8, 1.0), {}, Options());
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->adopted) << h->candidate;
  EXPECT_TRUE(SamePlan(h->plan, initial_));
  // A mild straggler (5% slower): what a re-split would gain over the horizon does not clear the
  // migration plus the 2% margin, so the running plan stays.
  auto mild = DecideReplan(predictor(), initial_, initial_, Rates(5, 1.05), {}, Options());
  ASSERT_TRUE(mild.ok());
  EXPECT_FALSE(mild->adopted) << mild->candidate << " gain " << mild->gain_s;
  // A one-step horizon with no margin: adopted only if one step's gain pays the migration.
  ControllerOptions one_step = Options();
  one_step.horizon_steps = 1;
  one_step.min_gain_fraction = 0.0;
  auto s = DecideReplan(predictor(), initial_, initial_, Rates(5, 3.0), {}, one_step);
  ASSERT_TRUE(s.ok());
  EXPECT_LE(s->migration_s, s->gain_s + 1e-12);  // it is chosen only because it pays for itself
  // The rule, in every case: adopted iff gain > migration + margin.
  for (const auto* r : {&*d, &*h, &*mild, &*s}) {
    const double margin = (r == &*s ? 0.0 : 0.02 * 200.0) * r->current_iteration_s;
    EXPECT_EQ(r->adopted, r->gain_s > r->migration_s + margin);
    EXPECT_EQ(r->adopted, !SamePlan(r->plan, initial_));
  }
}

TEST_F(ControllerTest, APlanTheRuntimeRejectsIsNotAdopted) {
  ControllerOptions o = Options();
  o.accept = [](const spec::Plan&) { return Err("optimizer_sharding 'zero1' is not implemented"); };
  auto d = DecideReplan(predictor(), initial_, initial_, Rates(5, 3.0), {}, o);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->adopted);
  EXPECT_TRUE(SamePlan(d->plan, initial_));
  EXPECT_NE(d->candidate.find("rejected by the runtime: optimizer_sharding"), std::string::npos)
      << d->candidate;
}

TEST_F(ControllerTest, AVerySlowDeviceIsDroppedAndRejoinsAfterRecovery) {
  const ControllerOptions o = Options();
  auto drop = DecideReplan(predictor(), initial_, initial_, Rates(5, 40.0), {}, o);
  ASSERT_TRUE(drop.ok()) << drop.status().message();
  ASSERT_TRUE(drop->adopted);
  EXPECT_EQ(drop->devices_out, std::vector<int>{5}) << drop->candidate;
  EXPECT_TRUE(
      spec::ValidatePlan(drop->plan, world_->run.cluster, world_->run.model, world_->run.train)
          .ok());
  // Still slow: stays out.
  auto still = DecideReplan(predictor(), initial_, drop->plan, Rates(5, 40.0), {}, o);
  ASSERT_TRUE(still.ok());
  EXPECT_FALSE(still->adopted) << still->candidate;
  // Its probe says it recovered: it comes back.
  auto back = DecideReplan(predictor(), initial_, drop->plan, perf::StragglerRates(8, 1.0), {}, o);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->adopted);
  EXPECT_TRUE(back->devices_out.empty()) << back->candidate;
  EXPECT_LT(back->new_iteration_s, back->current_iteration_s);
}

TEST_F(ControllerTest, BackgroundReplanIsDecidedAtAFixedBoundary) {
  ControllerOptions o = Options();
  o.adopt_after_steps = 3;
  ReplanController c(predictor(), initial_, o);
  auto r = c.AtStepBoundary(10, perf::StragglerRates(8, 1.0), {}, false);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_FALSE(c.in_flight());
  r = c.AtStepBoundary(11, Rates(5, 3.0), {}, true);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_TRUE(c.in_flight());  // training goes on while the thread plans
  for (int64_t step = 12; step < 14; ++step) {
    r = c.AtStepBoundary(step, Rates(5, 3.0), {}, false);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->has_value()) << step;
  }
  r = c.AtStepBoundary(14, Rates(5, 3.0), {}, false);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_TRUE((*r)->adopted);
  EXPECT_EQ((*r)->started_step, 11);
  EXPECT_EQ((*r)->decided_step, 14);
  EXPECT_TRUE(SamePlan(c.plan(), (*r)->plan));
  EXPECT_EQ(c.adopted_count(), 1);
  EXPECT_FALSE(c.in_flight());
}

TEST_F(ControllerTest, RatesThatMoveOnDuringAReplanMakeItStale) {
  ControllerOptions o = Options();
  o.adopt_after_steps = 2;
  ReplanController c(predictor(), initial_, o);
  ASSERT_TRUE(c.AtStepBoundary(1, Rates(5, 3.0), {}, true).ok());
  ASSERT_TRUE(c.AtStepBoundary(2, Rates(5, 6.0), {}, true).ok());  // changes while in flight
  auto r = c.AtStepBoundary(3, Rates(5, 6.0), {}, false);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());  // the 3x result is stale: dropped, a new re-plan started
  EXPECT_EQ(c.stale_results(), 1);
  EXPECT_TRUE(c.in_flight());
  r = c.AtStepBoundary(5, Rates(5, 6.0), {}, false);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_DOUBLE_EQ((*r)->rates[5], 6.0);
  EXPECT_EQ((*r)->started_step, 3);
}

}  // namespace
}  // namespace motley::straggler
