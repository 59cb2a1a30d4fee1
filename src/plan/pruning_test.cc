// Oracle test of the planner's branch and bound (docs/architecture.md §3 rule 4: the unpruned
// search is the oracle of the pruned one): on mid-size heterogeneous clusters, planning with
// PlannerOptions::prune gives the same evaluations, ranked candidates, times and choice as
// without it, while skipping predictions, and so does the pruned search on three threads. The bound
// itself is checked against every prediction made (LayoutEvaluator::Evaluate), so every planner
// test also tests it.
#include <gtest/gtest.h>

#include "core/sanitized_build.h"
#include "plan/planner.h"
#include "plan/test_util.h"

namespace motley::plan {
namespace {

// `only_types`: the search of those types alone (one type: the homogeneous sum's per-type
// search, where a single-type layout is pruned against the type's fastest time only).
void ExpectSameSearch(const testing::World& w, const std::string& what,
                      const std::vector<int>& only_types = {}) {
  PlannerOptions options;
  options.only_types = only_types;
  options.baselines = false;
  options.confirm_top = 1;
  options.prune = false;
  auto full = PlanCluster(*w.predictor, options);
  options.prune = true;
  auto pruned = PlanCluster(*w.predictor, options);
  ASSERT_TRUE(full.ok()) << what << ": " << full.status().message();
  ASSERT_TRUE(pruned.ok()) << what << ": " << pruned.status().message();
  EXPECT_EQ(full->evaluations_pruned, 0) << what;
  EXPECT_GT(pruned->evaluations_pruned, 0) << what << ": the bound never cut a candidate";
  EXPECT_EQ(pruned->layouts_considered, full->layouts_considered) << what;
  // A pruned evaluation leads where a predicted one would: the same evaluations in all.
  EXPECT_EQ(pruned->evaluations, full->evaluations) << what;
  ASSERT_EQ(pruned->ranked.size(), full->ranked.size()) << what;
  for (size_t i = 0; i < full->ranked.size(); ++i) {
    EXPECT_EQ(pruned->ranked[i].description, full->ranked[i].description) << what << " rank " << i;
    EXPECT_EQ(pruned->ranked[i].prediction.iteration_s, full->ranked[i].prediction.iteration_s)
        << what << " rank " << i;
  }
  EXPECT_EQ(pruned->best.description, full->best.description) << what;
  // Candidates evaluated on three threads, pruned against records a batch late: the same search.
  options.threads = 3;
  auto threaded = PlanCluster(*w.predictor, options);
  ASSERT_TRUE(threaded.ok()) << what << ": " << threaded.status().message();
  EXPECT_EQ(threaded->layouts_considered, full->layouts_considered) << what;
  EXPECT_EQ(threaded->evaluations, pruned->evaluations) << what;
  ASSERT_EQ(threaded->ranked.size(), full->ranked.size()) << what;
  for (size_t i = 0; i < full->ranked.size(); ++i) {
    EXPECT_EQ(threaded->ranked[i].description, full->ranked[i].description)
        << what << " rank " << i;
    EXPECT_EQ(threaded->ranked[i].prediction.iteration_s, full->ranked[i].prediction.iteration_s)
        << what << " rank " << i;
  }
  EXPECT_EQ(threaded->best.description, full->best.description) << what;
  std::printf("%s: %lld of %lld evaluations pruned\n", what.c_str(),
              static_cast<long long>(pruned->evaluations_pruned),
              static_cast<long long>(pruned->evaluations));
}

TEST(PruningTest, PrunedSearchEqualsTheFullSearch) {
  // Two types on two islands, 32 devices.
  auto two = testing::MakeWorld(
      {{"h", "h100", 2, 8, "nvlink", "ib-hdr"}, {"a", "a100-40g", 2, 8, "nvlink", "roce-100g"}},
      "eth-25g", "llama2-7b", 64, 2048);
  ExpectSameSearch(*two, "h100 + a100-40g, 32 devices");
  ExpectSameSearch(*two, "a100-40g alone, 16 devices", {1});
  if (kSanitizedBuild) return;  // one cluster there: the searches run tens of times slower
  // Three types on mixed NICs, 64 devices, a model that binds memory on the small devices.
  auto three = testing::MakeWorld({{"h", "h100", 2, 8, "nvlink", "ib-hdr"},
                                   {"a", "a100-80g", 2, 8, "nvlink", "roce-100g"},
                                   {"m", "mi250x", 4, 8, "xgmi", "eth-25g"}},
                                  "eth-25g", "llama2-13b", 128, 4096);
  ExpectSameSearch(*three, "three types, 64 devices");
  // The three-type preset at 128 devices.
  auto preset = std::make_unique<testing::World>();
  auto c = perf::MakeThreeTypeCluster(128);
  ASSERT_TRUE(c.ok());
  preset->cluster = *c;
  preset->model = *spec::ModelPreset("llama2-7b");
  preset->train.global_batch = 256;
  preset->train.seq_len = 2048;
  preset->Finish();
  ExpectSameSearch(*preset, "three-type preset, 128 devices");
}

}  // namespace
}  // namespace motley::plan
