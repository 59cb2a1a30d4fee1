// See elastic_run.h.
#include "elastic/elastic_run.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace motley::elastic {

void InjectScenario(const straggler::Scenario& scenario, const spec::ClusterSpec& cluster,
                    train::ParallelTrainerOptions* options) {
  options->device_rates.assign(static_cast<size_t>(cluster.num_devices()), {});
  for (int d = 0; d < cluster.num_devices(); ++d) {
    options->device_rates[static_cast<size_t>(d)] = scenario.DeviceSchedule(d);
  }
  if (scenario.has_link_events()) {
    options->link_rates = [scenario, cluster](int a, int b) {
      return scenario.LinkSchedule(cluster, a, b);
    };
  }
}

ElasticLoop::ElasticLoop(const spec::RunFile& run, const spec::Plan& initial,
                         std::FILE* progress,
                         const std::function<void(straggler::CoordinatorOptions&)>& tune)
    : run_(run), progress_(progress) {
  settings_ = perf::DefaultSettings(run_.cluster, run_.train);
  compute_ = std::make_unique<perf::RooflineComputeModel>(run_.cluster, run_.model, settings_);
  predictor_ = std::make_unique<perf::Predictor>(run_.cluster, run_.model, run_.train, *compute_,
                                                 settings_);
  straggler::CoordinatorOptions o;
  o.progress = progress;
  // Plans this runtime runs and migrates between: no ZeRO-1 (a switch to or from it is refused;
  // CheckPlanForRun has the last word).
  o.controller.planner.zero1 = false;
  o.controller.planner.exhaustive_max_units = 0;
  o.controller.accept = [this](const spec::Plan& p) { return train::CheckPlanForRun(run_, p); };
  // Idle ranks on emulated devices run a probe op each step, so a dropped device's recovery is
  // seen; on real devices there is no probe yet: keep every device in the plan.
  bool emulated = true;
  for (int d = 0; d < run_.cluster.num_devices(); ++d) {
    emulated = emulated && run_.cluster.device_type_of(d).is_emulated();
  }
  o.controller.allow_drop = emulated;
  if (tune) tune(o);
  coordinator_ = std::make_unique<straggler::StragglerCoordinator>(*predictor_, initial, o);
}

std::optional<spec::Plan> ElasticLoop::AfterStep(int64_t step, const train::StepReport& report) {
  std::vector<straggler::RankCompute> ranks;
  for (const train::StepReport::Rank& rank : report.ranks) {
    straggler::RankCompute c;
    c.device = rank.device;
    c.idle = rank.idle;
    c.compute_s = rank.times.forward_s + rank.times.backward_s - rank.times.tp_comm_s;
    c.probe_s = rank.probe_s;
    c.probe_expected_s = rank.probe_expected_s;
    ranks.push_back(c);
  }
  auto next = coordinator_->AfterStep(step, ranks);
  if (!next.ok()) {
    if (progress_ != nullptr) {
      fmt::print(progress_, "step {} | re-plan failed: {}\n", step, next.status().message());
    }
    return std::nullopt;
  }
  if (next->has_value()) {
    (*next)->source = fmt::format("replan after step {}", step);
    adopted_.push_back(**next);
  }
  return *next;
}

void ElasticLoop::Attach(train::ParallelTrainerOptions* options) {
  options->plan_switch = [this](int64_t step, const train::StepReport& report) {
    return AfterStep(step, report);
  };
  options->annotate_metrics = [this](int64_t /*step*/, nlohmann::ordered_json& line) {
    const nlohmann::ordered_json& record = coordinator_->last_record();
    if (!record.is_null()) line["straggler"] = record;
  };
}

}  // namespace motley::elastic
