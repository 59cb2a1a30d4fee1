// See references.h.
#include "plan/references.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/units.h"
#include "perf/memory_model.h"
#include "plan/plan_names.h"
#include "spec/model_flops.h"
#include "spec/plan_topology.h"

namespace motley::plan {

int64_t BatchShare(int64_t global_batch, int type_devices, int all_devices) {
  if (all_devices <= 0) return 0;
  const double share = static_cast<double>(global_batch) * type_devices / all_devices;
  return std::max<int64_t>(1, std::llround(share));
}

std::vector<TypeShare> HomogeneousShares(const perf::Predictor& predictor,
                                         const PlannerOptions& options) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  const std::vector<int> counts = cluster.DevicesPerType();
  std::vector<TypeShare> shares;
  for (size_t t = 0; t < counts.size(); ++t) {
    if (counts[t] == 0) continue;
    TypeShare share;
    share.type = static_cast<int>(t);
    share.type_name = cluster.device_types[t].name;
    share.devices = counts[t];
    share.global_batch =
        BatchShare(predictor.train().global_batch, counts[t], cluster.num_devices());
    spec::TrainSpec train = predictor.train();
    train.global_batch = share.global_batch;
    const perf::Predictor alone(cluster, predictor.model(), train, predictor.compute(),
                                predictor.settings());
    PlannerOptions o = options;
    o.only_types = {share.type};
    o.baselines = false;
    o.exhaustive_max_units = 0;
    o.progress = nullptr;
    Result<PlanReport> r = PlanCluster(alone, o);
    if (r.ok()) {
      share.tokens_per_s = r->best.TokensPerSecond(r->tokens_per_step);
      share.what = r->best.description;
    } else {
      const std::string& m = r.status().message();
      share.what = m.substr(0, m.find('\n'));
    }
    shares.push_back(std::move(share));
  }
  return shares;
}

double SumTokensPerSecond(const std::vector<TypeShare>& shares) {
  double sum = 0;
  for (const TypeShare& s : shares) sum += s.tokens_per_s;
  return sum;
}

double MfuAt(const perf::Predictor& predictor, double tokens_per_s,
             const std::vector<int>& devices) {
  return spec::Mfu(spec::ModelFlopsPerToken(predictor.model(), predictor.train().seq_len),
                   tokens_per_s, predictor.PeakFlopsSum(devices));
}

namespace {

// Devices of `type` that `plan` uses.
int UsedOfType(const spec::Plan& plan, const spec::ClusterSpec& cluster, int type) {
  int n = 0;
  for (int d : spec::PlanDevices(plan)) n += cluster.device(d).type == type ? 1 : 0;
  return n;
}

// Why no device of `type` can take part: one block with full recompute at the type's largest TP
// degree and the smallest micro-batch does not fit its memory ("" when it fits).
std::string MemoryReason(const perf::Predictor& predictor, const PlannerOptions& options,
                         int type) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  const std::vector<int> tps = ValidTp(cluster, predictor.model(), options, type);
  if (tps.empty()) return "no TP degree of the search divides the model on its nodes";
  perf::StageMemoryInput in;
  in.num_blocks = 1;
  in.tp = tps.back();
  in.micro_batch_size =
      options.micro_batch_sizes.empty()
          ? 1
          : *std::min_element(options.micro_batch_sizes.begin(), options.micro_batch_sizes.end());
  in.seq_len = predictor.train().seq_len;
  in.recompute = spec::Recompute::kFull;
  const double need = predictor.StageMemoryForPlanning(in, options.schedule);
  const spec::DeviceType& dt = cluster.device_types[static_cast<size_t>(type)];
  if (need <= dt.memory_bytes) return "";
  return fmt::format(
      "memory: one block with full recompute at TP {} needs {:.2f} GiB of its "
      "{:.2f} GiB",
      in.tp, need / kGiB, dt.memory_bytes / kGiB);
}

}  // namespace

std::vector<LeftOutDevices> ExplainLeftOut(const perf::Predictor& predictor,
                                           const PlannerOptions& options, const Candidate& chosen,
                                           const std::vector<const Candidate*>& others,
                                           int64_t tokens_per_step) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  std::map<int, std::vector<int>> by_type;
  for (int d : DevicesLeftOut(chosen.plan, cluster)) by_type[cluster.device(d).type].push_back(d);
  const double tps = chosen.TokensPerSecond(tokens_per_step);
  std::vector<LeftOutDevices> out;
  for (auto& [type, devices] : by_type) {
    LeftOutDevices left;
    left.type = type;
    left.type_name = cluster.device_types[static_cast<size_t>(type)].name;
    left.devices = std::move(devices);
    left.reason = MemoryReason(predictor, options, type);
    if (left.reason.empty()) {
      const int used = UsedOfType(chosen.plan, cluster, type);
      const Candidate* best = nullptr;
      for (const Candidate* c : others) {
        if (UsedOfType(c->plan, cluster, type) <= used) continue;
        if (best == nullptr ||
            c->TokensPerSecond(tokens_per_step) > best->TokensPerSecond(tokens_per_step)) {
          best = c;
        }
      }
      if (best != nullptr) {
        const double with = best->TokensPerSecond(tokens_per_step);
        left.reason = fmt::format(
            "slower with them: the best scored plan using {} of them, {}, gives {:.1f} tokens/s, "
            "{:.3f}x the chosen plan's",
            UsedOfType(best->plan, cluster, type), best->description, with, with / tps);
      } else {
        left.reason = "no plan the planner kept (ranked candidates and baselines) uses them";
      }
    }
    out.push_back(std::move(left));
  }
  return out;
}

}  // namespace motley::plan
