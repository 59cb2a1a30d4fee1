// The human-readable reports of the parallel trainer (parallel_trainer.h): the summary block of
// one run and the side-by-side comparison of runs of one job under several plans.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "core/check.h"
#include "train/parallel_trainer.h"

namespace motley::train {

std::string FormatParallelSummary(const ParallelTrainSummary& s) {
  std::string skipped = "none";
  if (!s.skipped_steps.empty()) {
    skipped = fmt::format("{} (step", s.skipped_steps.size());
    for (int64_t k : s.skipped_steps) skipped += fmt::format(" {}", k);
    skipped += ")";
  }
  const std::string clock = s.clock == "virtual" ? " of virtual time" : "";
  const std::string wall =
      s.clock == "virtual" ? fmt::format(" ({:.2f} s of wall time)", s.wall_time_s) : "";
  std::string migrations;
  if (!s.migrations.empty()) {
    migrations = fmt::format("plan switches: {}, {:.3f} MB moved in {:.3f} ms{} (final plan {})\n",
                             s.migrations.size(), static_cast<double>(s.migration_bytes) / 1e6,
                             s.migration_time_s * 1e3, clock, s.final_plan);
  }
  const std::string val =
      s.val_history.empty() ? ""
                            : fmt::format(", validation {:.4f} (step {})",
                                          s.val_history.back().second, s.val_history.back().first);
  return fmt::format(
      "done: {} steps on {} ranks, {} tokens in {:.3f} s{}{}: {:.0f} tokens/s, {:.2f} GFLOP/s "
      "achieved, MFU {:.2f}% ({} clock)\n"
      "loss: first step {:.4f}, final {:.4f}{}; skipped steps: {}\n{}",
      s.steps, s.ranks, s.tokens, s.train_time_s, clock, wall, s.tokens_per_s, s.gflops,
      100.0 * s.mfu, s.clock, s.losses.empty() ? 0.0 : s.losses.front(),
      s.losses.empty() ? 0.0 : s.losses.back(), val, skipped, migrations);
}

std::string FormatPlanComparison(const std::vector<std::string>& labels,
                                 const std::vector<ParallelTrainSummary>& summaries) {
  MOTLEY_CHECK(labels.size() == summaries.size() && !summaries.empty(),
               "FormatPlanComparison: one label per summary");
  size_t width = 4;
  for (const std::string& l : labels) width = std::max(width, l.size());
  std::string out =
      fmt::format("{:<{}}  {:>5}  {:>7}  {:>13}  {:>10}  {:>10}  {:>9}\n", "plan", width, "ranks",
                  "clock", "step time (s)", "tokens/s", "final loss", "speed-up");
  const ParallelTrainSummary& base = summaries.back();
  for (size_t i = 0; i < summaries.size(); ++i) {
    const ParallelTrainSummary& s = summaries[i];
    const double step_s = s.steps > 0 ? s.train_time_s / static_cast<double>(s.steps) : 0.0;
    const double speedup = base.tokens_per_s > 0 ? s.tokens_per_s / base.tokens_per_s : 0.0;
    out += fmt::format("{:<{}}  {:>5}  {:>7}  {:>13.4f}  {:>10.0f}  {:>10.4f}  {:>8.2f}x\n",
                       labels[i], width, s.ranks, s.clock, step_s, s.tokens_per_s,
                       s.losses.empty() ? 0.0 : s.losses.back(), speedup);
  }
  return out;
}

}  // namespace motley::train
