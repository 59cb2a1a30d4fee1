// See coordinator.h.
#include "straggler/coordinator.h"

#include <algorithm>

#include <fmt/core.h>

#include "straggler/report.h"

namespace motley::straggler {

StragglerCoordinator::StragglerCoordinator(const perf::Predictor& predictor,
                                           const spec::Plan& initial, CoordinatorOptions options)
    : predictor_(predictor),
      options_(std::move(options)),
      monitor_(predictor.cluster(), options_.monitor),
      controller_(predictor, initial, options_.controller) {
  MOTLEY_CHECK(options_.report_every >= 1, "CoordinatorOptions.report_every must be >= 1");
  MOTLEY_CHECK(options_.calibration_steps >= 1,
               "CoordinatorOptions.calibration_steps must be >= 1");
  const auto n = static_cast<size_t>(predictor.cluster().num_devices());
  factor_.assign(n, 0.0);
  cal_measured_.assign(n, 0.0);
  cal_predicted_.assign(n, 0.0);
  measured_.assign(n, 0.0);
  expected_.assign(n, 0.0);
  probe_measured_.assign(n, 0.0);
  probe_expected_.assign(n, 0.0);
  SetPlanWork(initial);
}

void StragglerCoordinator::SetPlanWork(const spec::Plan& plan) {
  predicted_.assign(static_cast<size_t>(predictor_.cluster().num_devices()), 0.0);
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    for (const spec::StagePlan& st : pipe.stages) {
      const perf::StageCost c = predictor_.StageCostOf(st, pipe.micro_batch_size, st.recompute, {});
      const Seconds per_step =
          static_cast<double>(pipe.micro_batches) * (c.forward_s + c.backward_s);
      for (int d : st.devices) predicted_[static_cast<size_t>(d)] = per_step;
    }
  }
}

Result<std::optional<spec::Plan>> StragglerCoordinator::AfterStep(
    int64_t step, const std::vector<RankCompute>& ranks) {
  ++steps_seen_;
  last_record_ = nlohmann::ordered_json();
  const bool calibrating = steps_seen_ <= options_.calibration_steps;
  for (const RankCompute& r : ranks) {
    const auto i = static_cast<size_t>(r.device);
    MOTLEY_CHECK(i < predicted_.size(), "RankCompute.device out of range");
    if (r.idle && r.probe_s > 0.0 && r.probe_expected_s > 0.0) {
      probe_measured_[i] += r.probe_s;
      probe_expected_[i] += r.probe_expected_s;
      continue;
    }
    if (r.idle || predicted_[i] <= 0.0 || !(r.compute_s > 0.0)) continue;
    if (calibrating) {
      cal_measured_[i] += r.compute_s;
      cal_predicted_[i] += predicted_[i];
      if (steps_seen_ == options_.calibration_steps)
        factor_[i] = cal_measured_[i] / cal_predicted_[i];
      continue;
    }
    if (factor_[i] <= 0.0) continue;  // not part of the calibration (joined later): not judged
    measured_[i] += r.compute_s;
    expected_[i] += factor_[i] * predicted_[i];
  }
  std::vector<RateChangeRecord> changes;
  bool report = false;
  if (!calibrating && step % options_.report_every == 0) {
    report = true;
    std::vector<DeviceSample> samples;
    for (size_t i = 0; i < measured_.size(); ++i) {
      if (expected_[i] > 0.0) {
        samples.push_back(DeviceSample{static_cast<int>(i), measured_[i], expected_[i], false});
      } else if (probe_expected_[i] > 0.0) {
        samples.push_back(
            DeviceSample{static_cast<int>(i), probe_measured_[i], probe_expected_[i], true});
      }
    }
    changes = monitor_.Report(step, samples, {});
    for (auto* v : {&measured_, &expected_, &probe_measured_, &probe_expected_}) {
      std::fill(v->begin(), v->end(), 0.0);
    }
  }
  const bool changed = !changes.empty();
  MOTLEY_ASSIGN_OR_RETURN(const std::optional<ReplanDecision> decision,
                          controller_.AtStepBoundary(step, monitor_.device_rates(), changed));
  if (options_.progress != nullptr) {
    if (changed) fmt::print(options_.progress, "step {} | {}\n", step, ChangesText(changes));
    if (decision.has_value()) {
      fmt::print(options_.progress, "step {} | {}\n", step,
                 DecisionText(*decision, options_.controller.horizon_steps));
    }
  }
  if (report || decision.has_value()) {
    last_record_ = StragglerRecord(monitor_, changes, controller_.in_flight(), decision);
  }
  if (decision.has_value() && decision->adopted) {
    SetPlanWork(decision->plan);
    return std::optional<spec::Plan>(decision->plan);
  }
  return std::optional<spec::Plan>();
}

}  // namespace motley::straggler
