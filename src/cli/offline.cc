// See offline.h.
#include "cli/offline.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/core.h>

#include "spec/limits.h"

namespace motley::cli {

Result<Straggler> ParseStraggler(std::string_view text, int num_devices) {
  auto usage = [&](std::string_view reason) {
    return Err(StatusCode::kInvalidArgument, "--straggler {}: {}", text, reason);
  };
  constexpr std::string_view kForm =
      "expected DEVICE_ID=RATE (e.g. 3=2.5) or A-B=RATE for the link between devices A and B "
      "(e.g. 3-4=10)";
  // One whole integer (no sign, spaces or trailing characters), as from_chars reads it.
  auto parse_id = [](std::string_view t, int64_t* id) {
    const char* end = t.data() + t.size();
    const auto [ptr, ec] = std::from_chars(t.data(), end, *id);
    return !t.empty() && ec == std::errc() && ptr == end;
  };
  auto check_id = [&](int64_t id) -> Status {
    if (id < 0 || id >= num_devices) {
      return usage(fmt::format("device {} does not exist (the cluster has devices 0..{})", id,
                               num_devices - 1));
    }
    return Status::Ok();
  };
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) return usage(kForm);
  const std::string_view target = text.substr(0, eq);
  const std::string_view rate_text = text.substr(eq + 1);
  const size_t dash = target.find('-');
  const bool link = dash != std::string_view::npos;
  int64_t id = -1;
  int64_t other = -1;
  if (!parse_id(link ? target.substr(0, dash) : target, &id) ||
      (link && !parse_id(target.substr(dash + 1), &other))) {
    return usage(kForm);
  }
  double rate = 0;
  const char* rate_end = rate_text.data() + rate_text.size();
  const auto [rate_ptr, rate_ec] = std::from_chars(rate_text.data(), rate_end, rate);
  if (rate_text.empty() || rate_ec != std::errc() || rate_ptr != rate_end) return usage(kForm);
  MOTLEY_RETURN_IF_ERROR(check_id(id));
  if (link) {
    MOTLEY_RETURN_IF_ERROR(check_id(other));
    if (other == id) return usage("a link joins two different devices");
  }
  if (!std::isfinite(rate) || rate < 1.0 || rate > spec::kMaxSlowdown) {
    return usage(fmt::format("the rate (times slower) must be in [1, {:g}], got {}",
                             spec::kMaxSlowdown, rate_text));
  }
  Straggler out;
  out.device = static_cast<int>(id);
  out.other = link ? static_cast<int>(other) : -1;
  out.rate = rate;
  return out;
}

Result<std::unique_ptr<Offline>> LoadOffline(spec::RunFile run, const std::string& profile_path,
                                             const std::vector<std::string>& stragglers) {
  auto o = std::make_unique<Offline>();
  MOTLEY_RETURN_IF_ERROR(perf::BuildRunPredictor(std::move(run), profile_path, o.get()));
  const int n = o->run.cluster.num_devices();
  for (const std::string& s : stragglers) {
    MOTLEY_ASSIGN_OR_RETURN(const Straggler entry, ParseStraggler(s, n));
    if (entry.is_link()) {
      o->link_rates.Set(entry.device, entry.other, entry.rate);
      continue;
    }
    if (o->rates.empty()) o->rates.assign(static_cast<size_t>(n), 1.0);
    o->rates[static_cast<size_t>(entry.device)] = entry.rate;
  }
  return o;
}

Result<plan::PlanReport> PlanOffline(const Offline& offline, plan::PlannerOptions options,
                                     bool quiet) {
  options.rates = offline.rates;
  options.link_rates = offline.link_rates;
  options.rank_top = std::max(options.rank_top, options.confirm_top);
  if (!quiet) {
    options.progress = [](std::string_view what, double f) {
      fmt::print(stderr, "[{:3.0f}%] {}\n", 100 * f, what);
    };
  }
  MOTLEY_ASSIGN_OR_RETURN(plan::PlanReport report, plan::PlanCluster(*offline.predictor, options));
  // The plan rule every command applies (spec/plan.h): never write a plan `train` would refuse.
  const spec::RunFile& run = offline.run;
  MOTLEY_RETURN_IF_ERROR(spec::ValidatePlan(report.best.plan, run.cluster, run.model, run.train)
                             .WithContext("the planner's best plan"));
  return report;
}

}  // namespace motley::cli
