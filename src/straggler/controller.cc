// See controller.h.
#include "straggler/controller.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include <fmt/core.h>

#include "plan/evaluate.h"
#include "plan/replan.h"
#include "plan/units.h"

namespace motley::straggler {
namespace {

std::set<int> PlanDevices(const spec::Plan& p) {
  std::set<int> out;
  for (const spec::PipelinePlan& pipe : p.pipelines) {
    for (const spec::StagePlan& st : pipe.stages) out.insert(st.devices.begin(), st.devices.end());
  }
  return out;
}

double RateOf(const perf::StragglerRates& rates, int device) {
  return rates.empty() ? 1.0 : rates.at(static_cast<size_t>(device));
}

struct Evaluated {
  spec::Plan plan;
  perf::Prediction prediction;
};

// The layout of `base` (its TP groups in its pipeline order) without the TP groups holding any
// device of `exclude`, re-split (blocks and micro-batches) for `rates` at base's micro-batch size
// and settings. Empty when nothing is left or the re-split does not fit.
std::optional<Evaluated> ResplitWithout(const perf::Predictor& predictor, const spec::Plan& base,
                                        const perf::StragglerRates& rates,
                                        const perf::LinkRates& link_rates,
                                        const std::set<int>& exclude) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  std::vector<plan::Unit> units;
  plan::Layout layout;
  for (const spec::PipelinePlan& pipe : base.pipelines) {
    std::vector<int> stages;
    for (const spec::StagePlan& st : pipe.stages) {
      const bool out = std::any_of(st.devices.begin(), st.devices.end(),
                                   [&](int d) { return exclude.count(d) > 0; });
      if (out) continue;
      plan::Unit u;
      u.devices = st.devices;
      u.tp = st.tp_degree;
      u.type = cluster.device(st.devices.front()).type;
      u.node = cluster.device(st.devices.front()).node;
      u.island = cluster.device(st.devices.front()).island;
      stages.push_back(static_cast<int>(units.size()));
      units.push_back(std::move(u));
    }
    if (!stages.empty()) layout.push_back(std::move(stages));
  }
  if (layout.empty()) return std::nullopt;
  const plan::LayoutEvaluator evaluator(predictor, units, rates, link_rates);
  plan::EvalSettings es;
  es.micro_batch_size = base.pipelines.front().micro_batch_size;
  es.recompute = spec::HeaviestRecompute(base);
  es.schedule = base.schedule;
  es.shardings = {base.optimizer_sharding};
  plan::LayoutEval ev = evaluator.Evaluate(layout, es);
  if (!ev.feasible || !ev.prediction.fits_memory) return std::nullopt;
  return Evaluated{std::move(ev.plan), std::move(ev.prediction)};
}

struct Scored {
  spec::Plan plan;
  Seconds iteration_s = 0;
  Bytes moved_bytes = 0;
  Seconds migration_s = 0;
  double score_s = 0;
  std::string name;
};

}  // namespace

bool SamePlan(const spec::Plan& a, const spec::Plan& b) {
  if (a.schedule != b.schedule || a.optimizer_sharding != b.optimizer_sharding ||
      a.pipelines.size() != b.pipelines.size()) {
    return false;
  }
  for (size_t p = 0; p < a.pipelines.size(); ++p) {
    const spec::PipelinePlan& x = a.pipelines[p];
    const spec::PipelinePlan& y = b.pipelines[p];
    if (x.micro_batches != y.micro_batches || x.micro_batch_size != y.micro_batch_size ||
        x.chunks != y.chunks || x.stages.size() != y.stages.size()) {
      return false;
    }
    for (size_t s = 0; s < x.stages.size(); ++s) {
      const spec::StagePlan& u = x.stages[s];
      const spec::StagePlan& v = y.stages[s];
      if (u.first_block != v.first_block || u.num_blocks != v.num_blocks ||
          u.has_embedding != v.has_embedding || u.has_head != v.has_head ||
          u.recompute != v.recompute || u.devices != v.devices || u.tp_degree != v.tp_degree) {
        return false;
      }
    }
  }
  return true;
}

Result<ReplanDecision> DecideReplan(const perf::Predictor& predictor, const spec::Plan& initial,
                                    const spec::Plan& current, const perf::StragglerRates& rates,
                                    const perf::LinkRates& link_rates,
                                    const ControllerOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const double horizon = static_cast<double>(options.horizon_steps);
  plan::ReplanOptions ro;
  ro.planner = options.planner;
  ro.planner.rates = rates;
  ro.planner.link_rates = link_rates;
  ro.horizon_steps = options.horizon_steps;
  MOTLEY_ASSIGN_OR_RETURN(const plan::ReplanResult rr, plan::Replan(predictor, current, ro));

  auto score = [&](const spec::Plan& p, const perf::Prediction& pred, std::string name) {
    Scored s;
    s.plan = p;
    s.iteration_s = pred.iteration_s;
    plan::MovedState(predictor, current, p, &s.moved_bytes, &s.migration_s);
    s.score_s = horizon * s.iteration_s + s.migration_s;
    s.name = std::move(name);
    return s;
  };
  const Seconds current_s = rr.current.candidate.prediction.iteration_s;
  Scored best = score(rr.chosen.candidate.plan, rr.chosen.candidate.prediction,
                      rr.chosen.candidate.description);
  auto consider = [&](const std::optional<Evaluated>& e, const std::string& name) {
    if (!e.has_value()) return;
    Scored s = score(e->plan, e->prediction, name);
    if (s.score_s < best.score_s) best = std::move(s);
  };

  const std::set<int> in_plan = PlanDevices(current);
  if (options.allow_drop && !rates.empty()) {
    std::set<int> slow;
    for (int d : in_plan) {
      if (RateOf(rates, d) >= options.drop_min_rate) slow.insert(d);
    }
    for (int d : slow) {
      consider(ResplitWithout(predictor, current, rates, link_rates, {d}),
               fmt::format("without device {}", d));
    }
    if (slow.size() > 1) {
      consider(ResplitWithout(predictor, current, rates, link_rates, slow),
               "without the slow devices");
    }
  }
  // Rejoin: devices of the initial plan that are out and no longer very slow come back.
  std::set<int> still_out;
  bool any_back = false;
  for (int d : PlanDevices(initial)) {
    if (in_plan.count(d) > 0) continue;
    if (options.allow_drop && RateOf(rates, d) >= options.drop_min_rate) {
      still_out.insert(d);
    } else {
      any_back = true;
    }
  }
  if (any_back) {
    consider(ResplitWithout(predictor, initial, rates, link_rates, still_out),
             "rejoin: the initial layout, re-split");
  }

  ReplanDecision d;
  d.candidate = best.name;
  d.rates = rates;
  d.link_rates = link_rates;
  d.current_iteration_s = current_s;
  d.new_iteration_s = best.iteration_s;
  d.gain_s = horizon * (current_s - best.iteration_s);
  d.migration_s = best.migration_s;
  d.moved_bytes = best.moved_bytes;
  d.adopted = !SamePlan(best.plan, current) &&
              d.gain_s > d.migration_s + options.min_gain_fraction * horizon * current_s;
  if (d.adopted && options.accept) {
    const Status ok = options.accept(best.plan);
    if (!ok.ok()) {
      d.adopted = false;
      d.candidate += " (rejected by the runtime: " + ok.message() + ")";
    }
  }
  d.plan = d.adopted ? best.plan : current;
  const std::set<int> chosen = PlanDevices(d.plan);
  for (int dev : PlanDevices(initial)) {
    if (chosen.count(dev) == 0) d.devices_out.push_back(dev);
  }
  d.replan_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return d;
}

ReplanController::ReplanController(const perf::Predictor& predictor, spec::Plan initial,
                                   ControllerOptions options)
    : predictor_(predictor),
      initial_(std::move(initial)),
      current_(initial_),
      options_(std::move(options)) {
  MOTLEY_CHECK(options_.horizon_steps > 0, "ControllerOptions.horizon_steps must be > 0");
  MOTLEY_CHECK(options_.adopt_after_steps >= 1, "ControllerOptions.adopt_after_steps must be >= 1");
}

ReplanController::~ReplanController() {
  if (worker_.joinable()) worker_.join();
}

int ReplanController::adopted_count() const {
  return static_cast<int>(std::count_if(decisions_.begin(), decisions_.end(),
                                        [](const ReplanDecision& d) { return d.adopted; }));
}

void ReplanController::Start(int64_t step, const perf::StragglerRates& rates,
                             const perf::LinkRates& link_rates) {
  MOTLEY_CHECK(!worker_.joinable(), "ReplanController: a re-plan is already running");
  started_step_ = step;
  job_rates_ = rates;
  job_link_rates_ = link_rates;
  std::promise<Result<ReplanDecision>> promise;
  result_ = promise.get_future();
  // The thread reads copies (plans, rates, options) and the predictor (const, thread-safe).
  worker_ = std::thread([p = std::move(promise), &predictor = predictor_, initial = initial_,
                         current = current_, rates, link_rates, options = options_]() mutable {
    p.set_value(DecideReplan(predictor, initial, current, rates, link_rates, options));
  });
}

Result<ReplanDecision> ReplanController::Join() {
  Result<ReplanDecision> r = result_.get();
  worker_.join();
  return r;
}

Result<std::optional<ReplanDecision>> ReplanController::AtStepBoundary(
    int64_t step, const perf::StragglerRates& rates, const perf::LinkRates& link_rates,
    bool rates_changed) {
  if (rates_changed) {
    latest_rates_ = rates;
    latest_link_rates_ = link_rates;
  }
  std::optional<ReplanDecision> out;
  if (worker_.joinable() && step >= started_step_ + options_.adopt_after_steps) {
    const bool ready = result_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    if (options_.wait_for_result || ready) {
      Result<ReplanDecision> r = Join();
      if (!r.ok()) return r.status().WithContext(fmt::format("re-plan at step {}", step));
      if (job_rates_ != latest_rates_ || !(job_link_rates_ == latest_link_rates_)) {
        ++stale_;  // the rates moved on while it ran; plan again for the newest ones
        rates_changed = true;
      } else {
        ReplanDecision d = std::move(r).value();
        d.started_step = started_step_;
        d.decided_step = step;
        if (d.adopted) current_ = d.plan;
        decisions_.push_back(d);
        out = std::move(d);
      }
    }
  }
  if (rates_changed && !worker_.joinable()) Start(step, latest_rates_, latest_link_rates_);
  return out;
}

}  // namespace motley::straggler
