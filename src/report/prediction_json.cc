// See prediction_json.h. The numbers are the Prediction's own, unrounded; the text `motley
// predict` prints rounds the same fields.
#include "report/prediction_json.h"

#include <nlohmann/json.hpp>

namespace motley::report {

std::string PredictionJson(const spec::ClusterSpec& cluster, const spec::Plan& plan,
                           const perf::Prediction& p) {
  nlohmann::ordered_json j;
  j["format"] = "motley-prediction";
  j["version"] = 1;
  j["iteration_s"] = p.iteration_s;
  j["pipeline_s"] = p.pipeline_s;
  j["exposed_dp_s"] = p.exposed_dp_s;
  j["optimizer_s"] = p.optimizer_s;
  j["tokens_per_s"] = p.tokens_per_s;
  j["mfu"] = p.mfu;
  j["fits_memory"] = p.fits_memory;
  j["memory_violation"] = p.memory_violation;
  nlohmann::ordered_json peak = nlohmann::ordered_json::object();
  for (size_t t = 0; t < cluster.device_types.size(); ++t) {
    if (p.peak_memory_per_type[t] > 0)
      peak[cluster.device_types[t].name] = p.peak_memory_per_type[t];
  }
  j["peak_memory_bytes"] = peak;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    for (size_t i = 0; i < pipe.stages.size(); ++i) {
      const spec::StagePlan& st = pipe.stages[i];
      const perf::StagePrediction& sp = p.stages[k][i];
      nlohmann::ordered_json s;
      s["pipeline"] = k;
      s["stage"] = i;
      s["device_type"] = cluster.device_types[static_cast<size_t>(sp.device_type)].name;
      s["devices"] = st.devices;
      s["tp"] = st.tp_degree;
      s["micro_batches"] = pipe.micro_batches;
      s["first_block"] = st.first_block;
      s["end_block"] = st.end_block();
      s["recompute"] = spec::RecomputeName(st.recompute);
      s["forward_s"] = sp.cost.forward_s;
      s["backward_s"] = sp.cost.backward_s;
      s["p2p_next_s"] = sp.p2p_next_s;
      s["dp_sync_s"] = sp.dp_sync_s;
      s["optimizer_s"] = sp.optimizer_s;
      s["memory_bytes"] = sp.memory.total();
      s["capacity_bytes"] = sp.capacity;
      stages.push_back(std::move(s));
    }
  }
  j["stages"] = std::move(stages);
  return j.dump(2) + "\n";
}

}  // namespace motley::report
