// A run file's predictor as every command builds it (`motley plan`, `predict`, `simulate`,
// `train --auto-plan`, through cli/offline.h, and the tests and benchmarks that must score plans
// as those commands do): settings from the cluster and the run file's train.precision /
// attention / sequence_parallel (perf::DefaultSettings); the compute model is a measured profile
// when one is given, else on an all-emulated cluster the emulated op-cost model the runtime
// charges (spec/op_costs.h), else the analytical kernel model (perf::RooflineComputeModel).
//
// Ownership: a RunPredictor owns the run and every model its predictor references, so it is
// neither copied nor moved (hold it by pointer). Thread safety: the built predictor is
// reentrant (perf/predictor.h).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "perf/compute_model.h"
#include "perf/emulated_compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "spec/run_file.h"

namespace motley::perf {

struct RunPredictor {
  RunPredictor() = default;
  RunPredictor(const RunPredictor&) = delete;
  RunPredictor& operator=(const RunPredictor&) = delete;

  spec::RunFile run;
  PerfSettings settings;
  std::unique_ptr<RooflineComputeModel> roofline;
  std::unique_ptr<ProfiledComputeModel> profiled;  // with a profile
  std::unique_ptr<EmulatedComputeModel> emulated;  // on an all-emulated cluster
  std::unique_ptr<Predictor> predictor;
};

// Fills `out` (fresh) for `run`. profile_path: a measured profile (docs/formats/profile.md) or
// empty. Errors: the profile's (unreadable, malformed, or not of the run's model).
Status BuildRunPredictor(spec::RunFile run, const std::string& profile_path, RunPredictor* out);

// The same, allocated.
Result<std::unique_ptr<RunPredictor>> MakeRunPredictor(spec::RunFile run,
                                                       const std::string& profile_path = "");

}  // namespace motley::perf
