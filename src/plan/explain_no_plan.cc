// See explain_no_plan.h.
#include "plan/explain_no_plan.h"

#include <limits>

#include <fmt/format.h>

#include "core/units.h"
#include "perf/memory_model.h"

namespace motley::plan {

Status ExplainNoPlan(const perf::Predictor& predictor, const PlannerOptions& options,
                     const std::map<std::string, std::string>& reasons,
                     const std::map<std::string, int64_t>& reason_counts, int64_t layouts) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  const spec::ModelSpec& model = predictor.model();
  const spec::TrainSpec& train = predictor.train();
  bool any_b = false;
  for (int64_t b : options.micro_batch_sizes) any_b |= b >= 1 && train.global_batch % b == 0;
  if (!any_b) {
    std::string sizes;
    for (int64_t b : options.micro_batch_sizes)
      sizes += fmt::format("{}{}", sizes.empty() ? "" : ", ", b);
    return Err(
        "no plan: train.global_batch {} is not divisible by any allowed micro-batch size ({})",
        train.global_batch, sizes);
  }
  // Model states alone, at their smallest (bf16 + ZeRO-1 over every device, or fp32), against the
  // whole cluster's memory.
  double capacity = 0;
  for (const spec::DeviceInfo& d : cluster.devices()) {
    capacity += cluster.device_types[static_cast<size_t>(d.type)].memory_bytes;
  }
  const double n = static_cast<double>(model.TotalParams());
  const double devices = cluster.num_devices();
  const bool fp32 = predictor.settings().precision == spec::Precision::kFp32;
  const double min_states = n * (fp32 ? 8.0 + 8.0 / devices : 4.0 + 12.0 / devices);
  if (min_states > capacity) {
    return Err(
        "no plan: the model does not fit: {} parameters need at least {:.1f} GiB for weights, "
        "gradients and optimizer states ({} bytes per parameter with ZeRO-1 over all {} devices) "
        "but the cluster has {:.1f} GiB in all",
        model.TotalParams(), min_states / kGiB, fp32 ? "8 + 8/d" : "4 + 12/d",
        cluster.num_devices(), capacity / kGiB);
  }
  std::string lines;
  if (reasons.count("batch") && !reasons.count("memory")) {
    // Batch limits hid the memory limit: say how deep a pipeline must be for memory alone.
    double best_fit = std::numeric_limits<double>::infinity();
    std::string where;
    for (size_t t = 0; t < cluster.device_types.size(); ++t) {
      for (int tp : ValidTp(cluster, model, options, static_cast<int>(t))) {
        perf::StageMemoryInput in;
        in.num_blocks = model.num_blocks;
        in.has_embedding = true;
        in.has_head = true;
        in.tp = tp;
        in.seq_len = train.seq_len;
        in.recompute = spec::Recompute::kFull;
        const double need = perf::StageMemoryPerDevice(model, in, predictor.settings()).total();
        const double have = cluster.device_types[t].memory_bytes;
        if (need / have < best_fit) {
          best_fit = need / have;
          where = fmt::format("'{}' at tp {} needs {:.1f} GiB of its {:.1f} GiB",
                              cluster.device_types[t].name, tp, need / kGiB, have / kGiB);
        }
      }
    }
    if (best_fit > 1) {
      lines += fmt::format(
          "\n  memory (no single stage holds the model, so every pipeline needs at least 2 stages "
          "and 2 micro-batches): the best single stage, {}",
          where);
    }
  }
  for (const auto& [category, example] : reasons) {
    lines += fmt::format("\n  {} ({} candidates), e.g. {}", category, reason_counts.at(category),
                         example);
  }
  return Err("no plan fits among {} layouts; binding constraints:{}", layouts, lines);
}

}  // namespace motley::plan
