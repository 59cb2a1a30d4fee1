// See elastic_run.h.
#include "elastic/elastic_run.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "parallel/world_layout.h"
#include "perf/emulated_compute_model.h"

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

std::vector<bool> MeasuredTypes(const spec::ClusterSpec& cluster,
                                const perf::ComputeModel& compute) {
  std::vector<bool> out(cluster.device_types.size(), false);
  const auto* emulated = dynamic_cast<const perf::EmulatedComputeModel*>(&compute);
  const auto* profiled = dynamic_cast<const perf::ProfiledComputeModel*>(&compute);
  for (size_t t = 0; t < out.size(); ++t) {
    const int type = static_cast<int>(t);
    out[t] = (emulated != nullptr && cluster.device_types[t].is_emulated()) ||
             (profiled != nullptr && profiled->Covers(type));
  }
  return out;
}

ElasticLoop::ElasticLoop(const spec::RunFile& run, const perf::Predictor& predictor,
                         const spec::Plan& initial, ElasticOptions options)
    : run_(run), world_(std::move(options.world_devices)), progress_(options.progress) {
  if (world_.empty()) {
    Result<parallel::WorldLayout> layout = parallel::WorldLayout::Build(initial);
    if (layout.ok()) world_ = layout->devices();
  }
  straggler::CoordinatorOptions o;
  o.progress = options.progress;
  o.measured_types = std::move(options.measured_types);
  // Plans this runtime runs and migrates between: ZeRO-1 ones too (their moments are gathered
  // whole for the move), any recompute; devices inside the world (CheckPlanForRun and the world
  // layout have the last word).
  o.controller.planner.exhaustive_max_units = 0;
  o.controller.accept = [this](const spec::Plan& p) -> Status {
    MOTLEY_RETURN_IF_ERROR(train::CheckPlanForRun(run_, p));
    return parallel::WorldLayout::Build(p, world_).status();
  };
  // Every idle rank runs a probe op each step (real devices too), so a dropped device's recovery
  // is seen: devices may leave the plan and come back.
  o.controller.allow_drop = true;
  if (options.tune) options.tune(o);
  coordinator_ = std::make_unique<straggler::StragglerCoordinator>(predictor, initial, o);
}

std::optional<spec::Plan> ElasticLoop::AfterStep(int64_t step, const train::StepReport& report) {
  std::vector<straggler::RankCompute> ranks;
  std::vector<straggler::LinkUse> links;
  for (const train::StepReport::Rank& rank : report.ranks) {
    straggler::RankCompute c;
    c.device = rank.device;
    c.idle = rank.idle;
    c.compute_s = rank.times.forward_s + rank.times.backward_s - rank.times.tp_comm_s;
    c.probe_s = rank.probe_s;
    c.probe_expected_s = rank.probe_expected_s;
    ranks.push_back(c);
    for (const train::StepReport::Rank::Link& l : rank.links) {
      links.push_back(
          straggler::LinkUse{rank.device, l.to_device, l.bytes, l.transfers, l.seconds});
    }
  }
  auto next = coordinator_->AfterStep(step, ranks, links);
  if (!next.ok()) {
    if (progress_ != nullptr) {
      fmt::print(progress_, "step {} | re-plan failed: {}\n", step, next.status().message());
    }
    return std::nullopt;
  }
  if (next->has_value()) {
    (*next)->source = fmt::format("replan after step {}", step);
    adopted_.push_back(**next);
    adopted_after_.push_back(step);
  }
  return *next;
}

void ElasticLoop::Attach(train::ParallelTrainerOptions* options) {
  options->straggler_reports = true;
  options->plan_switch = [this](int64_t step, const train::StepReport& report) {
    return AfterStep(step, report);
  };
  options->annotate_metrics = [this](int64_t /*step*/, nlohmann::ordered_json& line) {
    const nlohmann::ordered_json& record = coordinator_->last_record();
    if (!record.is_null()) line["straggler"] = record;
  };
}

}  // namespace motley::elastic
