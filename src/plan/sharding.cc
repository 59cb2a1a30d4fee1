// See sharding.h.
#include "plan/sharding.h"

#include <utility>

#include "plan/interleave.h"

namespace motley::plan {

bool ShardingAndChunksIfFaster(const perf::Predictor& predictor, bool try_unsharded,
                               const std::vector<int>& chunks, const perf::StragglerRates& rates,
                               const perf::LinkRates& links, spec::Plan* plan,
                               perf::Prediction* prediction) {
  spec::Plan best_plan = *plan;
  perf::Prediction best_prediction = *prediction;
  bool changed =
      InterleaveIfFaster(predictor, chunks, rates, links, &best_plan, &best_prediction) > 1;
  if (try_unsharded && plan->optimizer_sharding == spec::OptimizerSharding::kZero1) {
    spec::Plan unsharded = *plan;
    unsharded.optimizer_sharding = spec::OptimizerSharding::kNone;
    perf::Prediction pred = predictor.Predict(unsharded, rates, links);
    // Interleaving only adds memory: an unsharded plan over memory is over at every v.
    if (pred.fits_memory) {
      InterleaveIfFaster(predictor, chunks, rates, links, &unsharded, &pred);
      if (pred.iteration_s < best_prediction.iteration_s * (1 - 1e-12)) {
        best_plan = std::move(unsharded);
        best_prediction = std::move(pred);
        changed = true;
      }
    }
  }
  if (!changed) return false;
  *plan = std::move(best_plan);
  *prediction = std::move(best_prediction);
  return true;
}

std::string ShardingAndChunksNote(const spec::Plan& plan) {
  const bool unsharded =
      plan.pipelines.size() > 1 && plan.optimizer_sharding == spec::OptimizerSharding::kNone;
  return (unsharded ? ", no ZeRO-1" : "") + InterleaveNote(plan);
}

}  // namespace motley::plan
