// See offline.h.
#include "cli/offline.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <fmt/core.h>

#include "perf/profile.h"

namespace motley::cli {

Result<std::unique_ptr<Offline>> LoadOffline(spec::RunFile run, const std::string& profile_path,
                                             const std::vector<std::string>& stragglers) {
  auto o = std::make_unique<Offline>();
  o->run = std::move(run);
  o->settings = perf::DefaultSettings(o->run.cluster);
  o->roofline =
      std::make_unique<perf::RooflineComputeModel>(o->run.cluster, o->run.model, o->settings);
  const perf::ComputeModel* compute = o->roofline.get();
  bool all_emulated = !o->run.cluster.device_types.empty();
  for (const spec::DeviceType& t : o->run.cluster.device_types) all_emulated &= t.is_emulated();
  if (all_emulated) {  // the runtime charges emulated ops from spec/op_costs.h: count them so
    o->emulated = std::make_unique<perf::EmulatedComputeModel>(o->run.cluster, o->run.model);
    compute = o->emulated.get();
  }
  if (!profile_path.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(perf::Profile profile, perf::LoadProfile(profile_path));
    MOTLEY_RETURN_IF_ERROR(perf::CheckProfileMatchesModel(profile, o->run.model));
    o->profiled = std::make_unique<perf::ProfiledComputeModel>(std::move(profile), o->run.cluster,
                                                               *o->roofline);
    compute = o->profiled.get();
  }
  o->predictor = std::make_unique<perf::Predictor>(o->run.cluster, o->run.model, o->run.train,
                                                   *compute, o->settings);
  const int n = o->run.cluster.num_devices();
  for (const std::string& s : stragglers) {
    const size_t eq = s.find('=');
    const size_t dash = s.find('-');
    const bool link = dash != std::string::npos && dash < eq;
    int id = -1;
    int other = -1;
    double rate = 0;
    try {
      if (eq == std::string::npos) throw std::invalid_argument("no '='");
      id = std::stoi(s.substr(0, link ? dash : eq));
      if (link) other = std::stoi(s.substr(dash + 1, eq - dash - 1));
      rate = std::stod(s.substr(eq + 1));
    } catch (const std::exception&) {
      return Err(StatusCode::kInvalidArgument,
                 "--straggler {}: expected DEVICE_ID=RATE (e.g. 3=2.5) or A-B=RATE for the link "
                 "between devices A and B (e.g. 3-4=10)",
                 s);
    }
    if (id < 0 || id >= n || (link && (other < 0 || other >= n || other == id)) || !(rate >= 1.0)) {
      return Err(StatusCode::kInvalidArgument,
                 "--straggler {}: device ids must be in [0, {}) (two different ones for a link) "
                 "and rate >= 1",
                 s, n);
    }
    if (link) {
      o->link_rates.Set(id, other, rate);
      continue;
    }
    if (o->rates.empty()) o->rates.assign(static_cast<size_t>(n), 1.0);
    o->rates[static_cast<size_t>(id)] = rate;
  }
  return o;
}

Result<plan::PlanReport> PlanOffline(const Offline& offline, bool baselines, int rank_top,
                                     bool quiet) {
  plan::PlannerOptions options;
  options.rates = offline.rates;
  options.link_rates = offline.link_rates;
  // A cluster this machine can train on (emulated or CPU devices only) gets plans the runtime
  // runs: it keeps every activation, so no recompute (train::CheckPlanForRun refuses it).
  const spec::ClusterSpec& cluster = offline.predictor->cluster();
  bool runnable_here = true;
  for (const spec::DeviceType& t : cluster.device_types) {
    runnable_here = runnable_here && (t.is_emulated() || t.vendor == "cpu");
  }
  if (runnable_here) options.recompute = {spec::Recompute::kNone};
  options.baselines = baselines;
  options.rank_top = std::max(rank_top, options.confirm_top);
  if (!quiet) {
    options.progress = [](std::string_view what, double f) {
      fmt::print(stderr, "[{:3.0f}%] {}\n", 100 * f, what);
    };
  }
  return plan::PlanCluster(*offline.predictor, options);
}

}  // namespace motley::cli
