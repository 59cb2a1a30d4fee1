// Baselines and references beside the planner's answer (see planner.h): the best uniform
// Megatron-style plan, the compute bound, tokens/s of a candidate, and the text summary.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/parallel_for.h"
#include "core/thread_count.h"
#include "core/throughput.h"
#include "plan/interleave.h"
#include "plan/planner.h"
#include "plan/sharding.h"
#include "spec/model_flops.h"

namespace motley::plan {

double ComputeBoundTokensPerSecond(const perf::Predictor& predictor,
                                   const std::vector<int64_t>& micro_batch_sizes,
                                   const std::vector<int>& tp_degrees) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  const spec::ModelSpec& model = predictor.model();
  const int64_t s = predictor.train().seq_len;
  std::vector<double> best(cluster.device_types.size(), 0.0);
  for (size_t t = 0; t < best.size(); ++t) {
    for (int64_t b : micro_batch_sizes) {
      for (int tp : tp_degrees) {
        if (!model.SplitsForTensorParallel(tp)) continue;
        const perf::PassTimes pt = predictor.compute().Block(static_cast<int>(t), tp, b, s);
        // FLOP/s one device achieves on a block (its 1/tp share of 3 x forward FLOPs).
        const double rate =
            3.0 * spec::BlockForwardFlops(model, b, s) / tp / (pt.forward_s + pt.backward_s);
        best[t] = std::max(best[t], rate);
      }
    }
  }
  double sum = 0;
  for (const spec::DeviceInfo& d : cluster.devices()) sum += best[static_cast<size_t>(d.type)];
  return sum / spec::ModelFlopsPerToken(model, s);
}

Result<Candidate> BestUniformPlan(const perf::Predictor& predictor, const PlannerOptions& options) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  const spec::ModelSpec& model = predictor.model();
  const spec::TrainSpec& train = predictor.train();
  const int n = cluster.num_devices();
  // Every (tp, pp, micro-batch) shape, predicted side by side; per shape the first recompute
  // choice that fits. Taken in enumeration order: the first of equals, the last error.
  struct Shape {
    int tp = 1, pp = 1;
    int64_t b = 1;
    std::optional<Candidate> fit;
    std::string error;  // the shape's last refusal, empty when none
  };
  std::vector<Shape> shapes;
  for (int tp : options.tp_degrees) {
    if (n % tp != 0 || !model.SplitsForTensorParallel(tp)) continue;
    for (int pp = 1; pp <= model.num_blocks && pp <= n / tp; ++pp) {
      if ((n / tp) % pp != 0) continue;
      for (int64_t b : options.micro_batch_sizes) shapes.push_back(Shape{tp, pp, b, {}, {}});
    }
  }
  ParallelFor(shapes.size(), ThreadsOrAllCores(options.threads), [&](size_t i) {
    Shape& shape = shapes[i];
    const int dp = n / shape.tp / shape.pp;
    for (spec::Recompute rec : options.recompute) {
      spec::UniformPlanOptions u;
      u.dp = dp;
      u.pp = shape.pp;
      u.tp = shape.tp;
      u.micro_batch_size = shape.b;
      u.schedule = options.schedule;
      u.recompute = rec;
      u.optimizer_sharding = ShardingsFor(options.shardings, dp).front();
      auto plan = spec::UniformPlan(cluster, model, train, u);
      if (!plan.ok()) {
        shape.error = plan.status().message();
        return;
      }
      perf::Prediction pred = predictor.PredictIfFits(*plan, options.rates, options.link_rates);
      if (!pred.fits_memory) {
        shape.error = "memory: " + pred.memory_violation;
        continue;
      }
      shape.fit = Candidate{*plan, pred, 0.0,
                            fmt::format("uniform dp={} pp={} tp={} b={} recompute={}", dp, shape.pp,
                                        shape.tp, shape.b, spec::RecomputeName(rec))};
      return;
    }
  });
  std::optional<Candidate> best;
  std::string last_error = "no shape dp * pp * tp uses all devices";
  for (Shape& shape : shapes) {
    if (!shape.error.empty()) last_error = shape.error;
    if (shape.fit && (!best || shape.fit->prediction.iteration_s < best->prediction.iteration_s)) {
      best = std::move(shape.fit);
    }
  }
  if (!best) return Err("uniform plan: nothing fits; last reason: {}", last_error);
  // Megatron-LM interleaves too, and shards the optimizer or not: the best shape with the
  // interleaving degrees and shardings of the options.
  ShardingAndChunksIfFaster(predictor, options.shardings, options.interleave_chunks, options.rates,
                            options.link_rates, &best->plan, &best->prediction);
  best->description += ShardingAndChunksNote(best->plan);
  return *best;
}

const char* BaselineKindName(BaselineKind kind) {
  switch (kind) {
    case BaselineKind::kUniform: return "uniform";
    case BaselineKind::kHomogeneous: return "homogeneous";
    case BaselineKind::kIdentical: return "identical";
  }
  return "?";
}

Result<BaselineKind> ParseBaselineKind(std::string_view name) {
  for (BaselineKind k :
       {BaselineKind::kUniform, BaselineKind::kHomogeneous, BaselineKind::kIdentical}) {
    if (name == BaselineKindName(k)) return k;
  }
  return Err(StatusCode::kInvalidArgument,
             "'{}' is not a baseline (one of: uniform, homogeneous, identical)", name);
}

bool IsBaselineName(std::string_view name) {
  return ParseBaselineKind(name).ok();
}

Result<Candidate> FindBaseline(const PlanReport& report, BaselineKind kind) {
  for (const Baseline& b : report.baselines) {
    if (b.kind != kind) continue;
    if (!b.found) {
      return Err(StatusCode::kFailedPrecondition, "baseline {}: none fits ({})",
                 BaselineKindName(kind), b.why_not);
    }
    Candidate c = b.candidate;
    c.plan.comment =
        fmt::format("motley baseline '{}' ({}): {}", BaselineKindName(kind), b.name, c.description);
    return c;
  }
  return Err(StatusCode::kFailedPrecondition, "baseline {}: not computed (plan with baselines on)",
             BaselineKindName(kind));
}

double Candidate::TokensPerSecond(int64_t tokens_per_step) const {
  // Qualified: inside this member, the plain name is the member itself.
  return motley::TokensPerSecond(tokens_per_step,
                                 simulated_s > 0 ? simulated_s : prediction.iteration_s);
}

std::string SummarizeReport(const PlanReport& report) {
  const double tps = report.best.TokensPerSecond(report.tokens_per_step);
  std::string out = fmt::format(
      "chosen: {}: {:.1f} tokens/s, MFU {:.1f}% of the devices used, {:.1f}% of all devices, "
      "iteration {:.3f} s predicted",
      report.best.description, tps, 100 * report.mfu_used, 100 * report.mfu_all,
      report.best.prediction.iteration_s);
  if (report.best.simulated_s > 0) out += fmt::format(", {:.3f} s simulated", report.best.simulated_s);
  out += "\n";
  for (const Baseline& b : report.baselines) {
    if (b.found) {
      const double other = b.candidate.TokensPerSecond(report.tokens_per_step);
      out += fmt::format("  vs {}: {:.1f} tokens/s, speedup {:.3f}x ({})\n", b.name, other,
                         tps / other, b.candidate.description);
    } else {
      out += fmt::format("  vs {}: none ({})\n", b.name, b.why_not);
    }
  }
  std::vector<std::string> refs;
  if (report.compute_bound_tokens_per_s > 0) {
    refs.push_back(fmt::format("compute bound {:.1f} tokens/s (ratio {:.4f})",
                               report.compute_bound_tokens_per_s,
                               tps / report.compute_bound_tokens_per_s));
  }
  if (report.homogeneous_sum_tokens_per_s > 0) {
    refs.push_back(fmt::format("homogeneous sum {:.1f} (ratio {:.4f})",
                               report.homogeneous_sum_tokens_per_s,
                               tps / report.homogeneous_sum_tokens_per_s));
  }
  if (report.exhaustive_tokens_per_s > 0) {
    refs.push_back(fmt::format(
        "exhaustive optimum {:.1f} predicted (ratio of the top-ranked {:.4f})",
        report.exhaustive_tokens_per_s,
        report.ranked.front().prediction.tokens_per_s / report.exhaustive_tokens_per_s));
  }
  if (!refs.empty()) out += fmt::format("  references: {}\n", fmt::join(refs, "; "));
  for (const TypeShare& share : report.homogeneous_shares) {
    out += fmt::format("  homogeneous sum term: {} devices of type {} at {} of the batch: ",
                       share.devices, share.type_name, share.global_batch);
    out += share.tokens_per_s > 0
               ? fmt::format("{:.1f} tokens/s ({})\n", share.tokens_per_s, share.what)
               : fmt::format("none fits ({})\n", share.what);
  }
  for (const LeftOutDevices& left : report.left_out) {
    out += fmt::format("  left out: {} devices of type {}: {}\n", left.devices.size(),
                       left.type_name, left.reason);
  }
  return out;
}

}  // namespace motley::plan
