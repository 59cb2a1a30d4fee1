// What `motley predict` prints, as one JSON object (`motley predict --summary FILE`), for scripts
// that read a plan's predicted step (bench/plan_set.py): the step and its parts, tokens/s, MFU,
// memory, and every stage's per-micro-batch times and devices. The fields are documented in
// docs/formats/prediction.md. Pure function; thread-safe.
#pragma once

#include <string>

#include "perf/predictor.h"
#include "spec/cluster_spec.h"
#include "spec/plan.h"

namespace motley::report {

// `prediction` is Predictor::Predict of `plan` (a valid plan of `cluster`): its stages follow
// the plan's pipelines and (virtual) stages.
std::string PredictionJson(const spec::ClusterSpec& cluster, const spec::Plan& plan,
                           const perf::Prediction& prediction);

}  // namespace motley::report
