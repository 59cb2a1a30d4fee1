// Helpers for the straggler tests: the emulated 8-device run (testdata/) with a roofline predictor
// held together so that the references the predictor keeps stay valid, and the plan training
// starts from: the planner's best healthy plan. TP is left out of the search (tp_degrees {1}) so
// that plans are pipelines (2 x 4 stages under the 12 MiB devices) whose re-splits move state.
#pragma once

#include <memory>
#include <string>

#include "core/check.h"
#include "motley_source_dir.h"
#include "perf/compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "plan/planner.h"
#include "spec/run_file.h"

namespace motley::straggler::testing {

inline std::string TestData(const std::string& name) {
  return std::string(MOTLEY_SOURCE_DIR) + "/src/straggler/testdata/" + name;
}

struct World {
  spec::RunFile run;
  perf::PerfSettings settings;
  std::unique_ptr<perf::RooflineComputeModel> compute;
  std::unique_ptr<perf::Predictor> predictor;
  plan::PlannerOptions planner;  // what the tests' controllers search with
  spec::Plan initial;            // the planner's best plan at healthy rates
};

inline std::unique_ptr<World> LoadWorld(const std::string& run_file = "emulated-8-run.yaml") {
  auto w = std::make_unique<World>();
  auto run = spec::LoadRunFile(TestData(run_file));
  MOTLEY_CHECK(run.ok(), run.status().message());
  w->run = std::move(run).value();
  w->settings = perf::DefaultSettings(w->run.cluster);
  w->compute =
      std::make_unique<perf::RooflineComputeModel>(w->run.cluster, w->run.model, w->settings);
  w->predictor = std::make_unique<perf::Predictor>(w->run.cluster, w->run.model, w->run.train,
                                                   *w->compute, w->settings);
  w->planner.tp_degrees = {1};
  w->planner.exhaustive_max_units = 0;
  w->planner.baselines = false;
  auto best = plan::PlanCluster(*w->predictor, w->planner);
  MOTLEY_CHECK(best.ok(), best.status().message());
  w->initial = best->best.plan;
  return w;
}

}  // namespace motley::straggler::testing
