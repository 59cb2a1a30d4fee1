// See coordinator.h.
#include "straggler/coordinator.h"

#include <algorithm>

#include <fmt/core.h>

#include "straggler/report.h"

namespace motley::straggler {
namespace {

double Median(std::vector<double> v) {
  MOTLEY_CHECK(!v.empty(), "Median of nothing");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

StragglerCoordinator::StragglerCoordinator(const perf::Predictor& predictor,
                                           const spec::Plan& initial, CoordinatorOptions options)
    : predictor_(predictor),
      options_(std::move(options)),
      monitor_(predictor.cluster(), options_.monitor),
      controller_(predictor, initial, options_.controller) {
  MOTLEY_CHECK(options_.report_every >= 1, "CoordinatorOptions.report_every must be >= 1");
  MOTLEY_CHECK(options_.calibration_steps >= 1,
               "CoordinatorOptions.calibration_steps must be >= 1");
  MOTLEY_CHECK(options_.min_peers >= 1, "CoordinatorOptions.min_peers must be >= 1");
  const auto n = static_cast<size_t>(predictor.cluster().num_devices());
  own_.assign(n, Own{});
  own_probe_.assign(n, Own{});
  basis_.assign(n, Basis::kNone);
  measured_.assign(n, 0.0);
  expected_.assign(n, 0.0);
  probed_.assign(n, false);
  SetPlanWork(initial);
}

void StragglerCoordinator::SetPlanWork(const spec::Plan& plan) {
  predicted_.assign(static_cast<size_t>(predictor_.cluster().num_devices()), 0.0);
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    for (const spec::StagePlan& st : pipe.stages) {
      // The stage's compute alone (no intra link: the TP all-reduces left out, as the runtime's
      // compute time excludes its TP waits), at nominal speed.
      const perf::StageCost c = predictor_.StageCostOfShape(
          predictor_.cluster().device(st.devices.front()).type, st.tp_degree, nullptr,
          st.num_blocks, st.has_embedding, st.has_head, pipe.micro_batch_size, st.recompute, 1.0);
      const Seconds per_step =
          static_cast<double>(pipe.micro_batches) * (c.forward_s + c.backward_s);
      for (int d : st.devices) predicted_[static_cast<size_t>(d)] = per_step;
    }
  }
}

bool StragglerCoordinator::Measured(int device) const {
  const auto type = static_cast<size_t>(predictor_.cluster().device(device).type);
  return type < options_.measured_types.size() && options_.measured_types[type];
}

const char* StragglerCoordinator::expectation(int device) const {
  switch (basis_.at(static_cast<size_t>(device))) {
    case Basis::kProfile: return "profile";
    case Basis::kPeers: return "peers";
    case Basis::kOwn: return "own";
    case Basis::kNone: return "";
  }
  return "";
}

Result<std::optional<spec::Plan>> StragglerCoordinator::AfterStep(
    int64_t step, const std::vector<RankCompute>& ranks, const std::vector<LinkUse>& links) {
  last_record_ = nlohmann::ordered_json();
  const spec::ClusterSpec& cluster = predictor_.cluster();
  const size_t num_types = cluster.device_types.size();
  // This step's ratios measured / predicted of working devices, and probe times, per type.
  std::vector<std::vector<double>> ratios(num_types), probes(num_types);
  for (const RankCompute& r : ranks) {
    MOTLEY_CHECK(r.device >= 0 && r.device < cluster.num_devices(),
                 "RankCompute.device out of range");
    const auto i = static_cast<size_t>(r.device);
    const auto type = static_cast<size_t>(cluster.device(r.device).type);
    if (!r.idle && predicted_[i] > 0.0 && r.compute_s > 0.0) {
      ratios[type].push_back(r.compute_s / predicted_[i]);
    }
    if (r.probe_s > 0.0) probes[type].push_back(r.probe_s);
  }
  std::vector<double> reference(num_types, 0.0), probe_reference(num_types, 0.0);
  for (size_t t = 0; t < num_types; ++t) {
    if (static_cast<int>(ratios[t].size()) >= options_.min_peers) reference[t] = Median(ratios[t]);
    if (static_cast<int>(probes[t].size()) >= options_.min_peers) {
      probe_reference[t] = Median(probes[t]);
    }
  }
  for (const RankCompute& r : ranks) {
    const auto i = static_cast<size_t>(r.device);
    const auto type = static_cast<size_t>(cluster.device(r.device).type);
    if (r.idle) {
      if (!(r.probe_s > 0.0)) continue;
      Seconds expected = 0.0;
      if (r.probe_expected_s > 0.0) {
        expected = r.probe_expected_s;
        basis_[i] = Basis::kProfile;
      } else if (probe_reference[type] > 0.0) {
        expected = probe_reference[type];
        basis_[i] = Basis::kPeers;
      } else {
        Own& own = own_probe_[i];
        if (own.steps < options_.calibration_steps) {
          own.measured += r.probe_s;
          own.predicted += 1.0;
          ++own.steps;
          continue;
        }
        expected = own.factor();
        basis_[i] = Basis::kOwn;
      }
      measured_[i] += r.probe_s;
      expected_[i] += expected;
      probed_[i] = true;
      continue;
    }
    if (!(predicted_[i] > 0.0) || !(r.compute_s > 0.0)) continue;
    Seconds expected = 0.0;
    if (Measured(r.device)) {
      expected = predicted_[i];
      basis_[i] = Basis::kProfile;
    } else if (reference[type] > 0.0) {
      expected = predicted_[i] * reference[type];
      basis_[i] = Basis::kPeers;
    } else {
      // Too few peers and no profile: the device's own first steps are its normal (the factor
      // stays when the plan changes, so the expected time follows the new work).
      Own& own = own_[i];
      if (own.steps < options_.calibration_steps) {
        own.measured += r.compute_s;
        own.predicted += predicted_[i];
        ++own.steps;
        continue;
      }
      expected = predicted_[i] * own.factor();
      basis_[i] = Basis::kOwn;
    }
    measured_[i] += r.compute_s;
    expected_[i] += expected;
  }
  for (const LinkUse& l : links) {
    if (l.from_device == l.to_device) continue;
    LinkAcc& acc =
        links_[{std::min(l.from_device, l.to_device), std::max(l.from_device, l.to_device)}];
    acc.bytes += l.bytes;
    acc.transfers += l.transfers;
    acc.wire_s += l.wire_s;
  }

  std::vector<RateChangeRecord> changes;
  bool report = false;
  if (step % options_.report_every == 0) {
    report = true;
    std::vector<DeviceSample> samples;
    for (size_t i = 0; i < measured_.size(); ++i) {
      if (expected_[i] > 0.0) {
        samples.push_back(DeviceSample{static_cast<int>(i), measured_[i], expected_[i],
                                       static_cast<bool>(probed_[i])});
      }
    }
    std::vector<LinkSample> link_samples;
    for (const auto& [key, acc] : links_) {
      link_samples.push_back(
          LinkSample{key.first, key.second, acc.bytes, acc.transfers, acc.wire_s});
    }
    changes = monitor_.Report(step, samples, link_samples);
    std::fill(measured_.begin(), measured_.end(), 0.0);
    std::fill(expected_.begin(), expected_.end(), 0.0);
    std::fill(probed_.begin(), probed_.end(), false);
    links_.clear();
  }
  const bool changed = !changes.empty();
  MOTLEY_ASSIGN_OR_RETURN(
      const std::optional<ReplanDecision> decision,
      controller_.AtStepBoundary(step, monitor_.device_rates(), monitor_.link_rates(), changed));
  if (options_.progress != nullptr) {
    if (changed) fmt::print(options_.progress, "step {} | {}\n", step, ChangesText(changes));
    if (decision.has_value()) {
      fmt::print(options_.progress, "step {} | {}\n", step,
                 DecisionText(*decision, options_.controller.horizon_steps));
    }
  }
  if (report || decision.has_value()) {
    last_record_ = StragglerRecord(monitor_, changes, controller_.in_flight(), decision);
    nlohmann::ordered_json from = nlohmann::ordered_json::array();
    for (size_t i = 0; i < basis_.size(); ++i) from.push_back(expectation(static_cast<int>(i)));
    last_record_["expected_from"] = std::move(from);
  }
  if (decision.has_value() && decision->adopted) {
    SetPlanWork(decision->plan);
    return std::optional<spec::Plan>(decision->plan);
  }
  return std::optional<spec::Plan>();
}

}  // namespace motley::straggler
