// See sharding.h.
#include "plan/sharding.h"

#include <utility>

#include "plan/interleave.h"

namespace motley::plan {

std::vector<spec::OptimizerSharding> ShardingsFor(
    const std::vector<spec::OptimizerSharding>& shardings, int64_t pipelines) {
  if (pipelines > 1 && !shardings.empty()) return shardings;
  return {spec::OptimizerSharding::kNone};
}

bool ShardingAndChunksIfFaster(const perf::Predictor& predictor,
                               const std::vector<spec::OptimizerSharding>& shardings,
                               const std::vector<int>& chunks, const perf::StragglerRates& rates,
                               const perf::LinkRates& links, spec::Plan* plan,
                               perf::Prediction* prediction) {
  spec::Plan best_plan = *plan;
  perf::Prediction best_prediction = *prediction;
  bool changed =
      InterleaveIfFaster(predictor, chunks, rates, links, &best_plan, &best_prediction) > 1;
  const int64_t pipelines = static_cast<int64_t>(plan->pipelines.size());
  for (const spec::OptimizerSharding sharding : ShardingsFor(shardings, pipelines)) {
    if (sharding == plan->optimizer_sharding) continue;
    spec::Plan other = *plan;
    other.optimizer_sharding = sharding;
    perf::Prediction pred = predictor.PredictIfFits(other, rates, links);
    // Interleaving only adds memory: a plan over memory at one chunk is over at every v.
    if (!pred.fits_memory) continue;
    InterleaveIfFaster(predictor, chunks, rates, links, &other, &pred);
    if (pred.iteration_s < best_prediction.iteration_s * (1 - 1e-12)) {
      best_plan = std::move(other);
      best_prediction = std::move(pred);
      changed = true;
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
