// Shared cases of the plan-switch tests (issue 6 acceptance), for the threads launch
// (plan_switch_test.cc) and mpiexec (mpi_plan_switch_test.cc): 20 steps of the tiny model with a
// switch of plan at a step boundary, whose losses must equal the serial run's within 1e-5
// relative, and whose state checksums (every replica, per full tensor) must be equal just before
// and just after each migration. Each case uses at most 4 devices (0-3, node n0 of the cluster).
#pragma once

#include <cmath>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include "parallel_test_util.h"
#include "train/parallel_trainer.h"

namespace motley::testing {

inline constexpr int64_t kSwitchSteps = 20;
inline constexpr double kSwitchRelTol = 1e-5;

struct SwitchCase {
  spec::Plan start;
  std::vector<train::PlanSwitch> switches;
};

// 3 devices: pure data parallelism with uneven batches -> a pipeline with uneven blocks.
inline SwitchCase DpToPpUneven() {
  return {MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                    Pipeline({Stage(0, 4, true, true, {1})}, 1, 4),
                    Pipeline({Stage(0, 4, true, true, {2})}, 2, 1)},
                   "dp3-uneven"),
          {{10, MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 2, false, false, {1}),
                                    Stage(3, 1, false, true, {2})},
                                   4, 3)},
                         "pp3-uneven")}}};
}

// 4 devices: TP 2 x PP 2 -> a replica on one device beside a replica of a TP-2 stage and a TP-1
// stage (each block changes TP degree or owner, shards are re-cut).
inline SwitchCase TpChange() {
  return {
      MakePlan(
          {Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {2, 3})}, 4, 3)},
          "tp2-pp2"),
      {{10, MakePlan(
                {Pipeline({Stage(0, 4, true, true, {3})}, 2, 3),
                 Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2})}, 3, 2)},
                "dp2-mixed-tp")}}};
}

// 4 devices: two 2-stage replicas; after step 7 device 3 is dropped (the second replica runs on
// device 2 alone), after step 14 it is taken back.
inline SwitchCase DropAndRejoin() {
  spec::Plan full =
      MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 3, 2),
                Pipeline({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})}, 3, 2)},
               "pp2-dp2");
  spec::Plan dropped =
      MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 3, 2),
                Pipeline({Stage(0, 4, true, true, {2})}, 2, 3)},
               "without-device-3");
  return {full, {{7, dropped}, {14, full}}};
}

// Checks a run with switches: the serial trajectory, one migration record per switch with the
// expected plans, and equal checksums before and after each migration (run with
// check_migrations, which also fails the run on a difference).
inline void ExpectSwitchedRunMatches(const SwitchCase& c, const train::ParallelTrainSummary& s,
                                     const std::vector<double>& serial) {
  ASSERT_EQ(serial.size(), static_cast<size_t>(kSwitchSteps));
  ASSERT_EQ(s.losses.size(), serial.size());
  double worst = 0.0;
  for (size_t k = 0; k < serial.size(); ++k) {
    const double rel = std::abs(s.losses[k] - serial[k]) / std::abs(serial[k]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kSwitchRelTol) << c.start.source << ": step " << k + 1 << " loss " << s.losses[k]
                                  << " vs serial " << serial[k];
  }
  EXPECT_TRUE(s.skipped_steps.empty());
  EXPECT_LT(s.losses.back(), s.losses.front() - 0.5);
  ASSERT_EQ(s.migrations.size(), c.switches.size());
  int64_t bytes = 0;
  for (size_t i = 0; i < c.switches.size(); ++i) {
    const train::MigrationRecord& m = s.migrations[i];
    EXPECT_EQ(m.step, c.switches[i].step);
    EXPECT_EQ(m.to, c.switches[i].plan.source);
    EXPECT_EQ(m.from, i == 0 ? c.start.source : c.switches[i - 1].plan.source);
    EXPECT_GE(m.time_s, m.transfer_s);
    EXPECT_GT(m.time_s, 0.0);
    int64_t sent = 0, received = 0;
    for (int64_t b : m.sent_bytes) sent += b;
    for (int64_t b : m.received_bytes) received += b;
    EXPECT_EQ(sent, m.bytes);
    EXPECT_EQ(received, m.bytes);
    bytes += m.bytes;
    // Checksums per full tensor: every replica before equals every replica after.
    ASSERT_EQ(m.before.size(),
              i == 0 ? c.start.pipelines.size() : c.switches[i - 1].plan.pipelines.size());
    ASSERT_EQ(m.after.size(), c.switches[i].plan.pipelines.size());
    for (const parallel::StateChecksum& after : m.after) {
      EXPECT_EQ(after.hash, m.before.front().hash) << "migration " << i;
      EXPECT_EQ(after.elements, m.before.front().elements);
      EXPECT_NEAR(after.value_sum, m.before.front().value_sum,
                  1e-9 * std::abs(m.before.front().value_sum) + 1e-9);
      const parallel::StateChecksum& b = m.before.front();
      EXPECT_NEAR(after.m_sum, b.m_sum, 1e-9 * std::abs(b.m_sum) + 1e-12);
      EXPECT_NEAR(after.v_sum, b.v_sum, 1e-9 * std::abs(b.v_sum) + 1e-15);
    }
    EXPECT_GT(m.before.front().elements, 0);
    EXPECT_GT(m.before.front().v_sum, 0.0);  // AdamW's second moments are there and moved
    std::printf(
        "  after step %lld: %s -> %s, %lld bytes sent, %lld kept, %.3f ms (%s clock), "
        "transfer %.3f ms\n",
        static_cast<long long>(m.step), m.from.c_str(), m.to.c_str(),
        static_cast<long long>(m.bytes), static_cast<long long>(m.local_bytes), m.time_s * 1e3,
        s.clock.c_str(), m.transfer_s * 1e3);
  }
  EXPECT_EQ(s.migration_bytes, bytes);
  EXPECT_EQ(s.final_plan, c.switches.back().plan.source);
  std::printf("%s: %zu switch(es), %lld bytes moved, worst relative loss difference %.3g\n",
              c.start.source.c_str(), c.switches.size(), static_cast<long long>(bytes), worst);
}

}  // namespace motley::testing
