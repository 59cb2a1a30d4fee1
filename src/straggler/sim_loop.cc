// See sim_loop.h.
#include "straggler/sim_loop.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/throughput.h"
#include "sim/simulator.h"
#include "straggler/report.h"

namespace motley::straggler {
namespace {

// Nominal time of the probe op of a device outside the plan (synthetic: only the ratio counts).
constexpr Seconds kProbeSeconds = 1e-3;

std::set<int> PlanDevices(const spec::Plan& p) {
  std::set<int> out;
  for (const spec::PipelinePlan& pipe : p.pipelines) {
    for (const spec::StagePlan& st : pipe.stages) out.insert(st.devices.begin(), st.devices.end());
  }
  return out;
}

}  // namespace

Result<LoopResult> RunSimulatedLoop(const perf::Predictor& predictor, const spec::Plan& initial,
                                    const Scenario& scenario, const LoopOptions& options) {
  MOTLEY_CHECK(options.report_every >= 1, "LoopOptions.report_every must be >= 1");
  const spec::ClusterSpec& cluster = predictor.cluster();
  const int nd = cluster.num_devices();
  const sim::Simulator simulator(predictor);
  RateMonitor monitor(cluster, options.monitor);
  ReplanController controller(predictor, initial, options.controller);
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> jitter(1.0 - options.jitter, 1.0 + options.jitter);
  const std::set<int> initial_devices = PlanDevices(initial);

  LoopResult out;
  spec::Plan current = initial;
  int version = 0;
  Seconds pending_migration_s = 0;
  std::vector<Seconds> nominal_busy;  // of `current` at nominal speed
  auto refresh_nominal = [&]() -> Status {
    MOTLEY_ASSIGN_OR_RETURN(const sim::SimResult r, simulator.Run(current));
    nominal_busy = r.device_busy_s;
    return Status::Ok();
  };
  MOTLEY_RETURN_IF_ERROR(refresh_nominal());
  std::vector<Seconds> measured(static_cast<size_t>(nd), 0.0);
  std::vector<Seconds> expected(static_cast<size_t>(nd), 0.0);
  std::vector<bool> probed(static_cast<size_t>(nd), false);
  struct LinkAcc {
    Bytes bytes = 0;
    int64_t transfers = 0;
    Seconds measured_s = 0;
  };
  std::map<std::pair<int, int>, LinkAcc> links;
  const int64_t tokens = predictor.train().global_batch * predictor.train().seq_len;
  Seconds total_s = 0;

  for (int64_t step = 1; step <= options.steps; ++step) {
    perf::StragglerRates slowdown(static_cast<size_t>(nd), 1.0);
    for (int d = 0; d < nd; ++d) {
      const double j = options.jitter > 0 ? jitter(rng) : 1.0;
      slowdown[static_cast<size_t>(d)] = j / scenario.DeviceSpeedAt(d, step);
    }
    sim::SimOptions so;
    so.rates = slowdown;
    MOTLEY_ASSIGN_OR_RETURN(const sim::SimResult r, simulator.Run(current, so));
    const Seconds step_s = r.iteration_s + pending_migration_s;
    pending_migration_s = 0;
    out.step_times_s.push_back(step_s);
    out.plan_version.push_back(version);
    total_s += step_s;

    // What the ranks measure: their own compute (the simulator charges a TP group at its slowest
    // member's rate; a member's own compute is that time scaled by its own rate).
    const std::set<int> in_plan = PlanDevices(current);
    for (const spec::PipelinePlan& pipe : current.pipelines) {
      for (const spec::StagePlan& st : pipe.stages) {
        const double group = perf::GroupRate(slowdown, st.devices);
        for (int d : st.devices) {
          const size_t i = static_cast<size_t>(d);
          measured[i] += r.device_busy_s[i] * slowdown[i] / group;
          expected[i] += nominal_busy[i];
        }
      }
    }
    for (int d : initial_devices) {
      if (in_plan.count(d) > 0) continue;
      const size_t i = static_cast<size_t>(d);
      measured[i] += kProbeSeconds * slowdown[i];
      expected[i] += kProbeSeconds;
      probed[i] = true;
    }
    for (const spec::PipelinePlan& pipe : current.pipelines) {
      const Bytes msg = predictor.ActivationMessageBytes(pipe.micro_batch_size);
      for (size_t s = 0; s + 1 < pipe.stages.size(); ++s) {
        const int a = pipe.stages[s].devices.front();
        const int b = pipe.stages[s + 1].devices.front();
        const spec::LinkClass& cls = cluster.LinkBetween(a, b);
        const int64_t n = 2 * pipe.micro_batches;  // activations forward, gradients backward
        const double j = options.jitter > 0 ? jitter(rng) : 1.0;
        LinkAcc& acc = links[{std::min(a, b), std::max(a, b)}];
        acc.bytes += static_cast<double>(n) * msg;
        acc.transfers += n;
        acc.measured_s += static_cast<double>(n) * cls.TransferTime(msg) * j /
                          scenario.LinkSpeedAt(cluster, a, b, step);
      }
    }

    bool changed = false;
    std::vector<RateChangeRecord> changes;
    const bool report = step % options.report_every == 0;
    if (report) {
      std::vector<DeviceSample> ds;
      for (int d = 0; d < nd; ++d) {
        const size_t i = static_cast<size_t>(d);
        if (expected[i] > 0) ds.push_back(DeviceSample{d, measured[i], expected[i], probed[i]});
      }
      std::vector<LinkSample> ls;
      for (const auto& [key, acc] : links) {
        ls.push_back(LinkSample{key.first, key.second, acc.bytes, acc.transfers, acc.measured_s});
      }
      changes = monitor.Report(step, ds, ls);
      // Device and link rates both re-plan (the predictor applies link rates to the link's
      // transfers; the simulated step itself does not see them, see the top of sim_loop.h).
      changed = !changes.empty();
      out.changes.insert(out.changes.end(), changes.begin(), changes.end());
      std::fill(measured.begin(), measured.end(), 0.0);
      std::fill(expected.begin(), expected.end(), 0.0);
      std::fill(probed.begin(), probed.end(), false);
      links.clear();
    }
    std::optional<ReplanDecision> decision;
    if (options.replan) {
      MOTLEY_ASSIGN_OR_RETURN(decision, controller.AtStepBoundary(step, monitor.device_rates(),
                                                                  monitor.link_rates(), changed));
      if (decision.has_value() && decision->adopted) {
        current = decision->plan;
        ++version;
        pending_migration_s = decision->migration_s;
        MOTLEY_RETURN_IF_ERROR(refresh_nominal());
      }
    }
    if (options.progress != nullptr) {
      if (!changes.empty())
        fmt::print(options.progress, "step {} | {}\n", step, ChangesText(changes));
      if (decision.has_value()) {
        fmt::print(options.progress, "step {} | {}\n", step,
                   DecisionText(*decision, options.controller.horizon_steps));
      }
    }
    if (options.metrics != nullptr) {
      nlohmann::ordered_json j;
      j["step"] = step;
      j["step_time_s"] = step_s;
      j["plan_version"] = out.plan_version.back();
      if (report || decision.has_value()) {
        j["straggler"] = StragglerRecord(monitor, changes, controller.in_flight(), decision);
      }
      const std::string line = j.dump() + "\n";
      if (std::fputs(line.c_str(), options.metrics) < 0) {
        return Err("straggler loop metrics: write failed at step {}", step);
      }
    }
  }
  out.decisions = controller.decisions();
  out.adopted = controller.adopted_count();
  out.final_rates = monitor.device_rates();
  out.slow_links = monitor.slow_links();
  out.final_plan = current;
  out.tokens_per_s =
      TokensPerSecond(static_cast<double>(tokens) * static_cast<double>(options.steps), total_s);
  return out;
}

}  // namespace motley::straggler
