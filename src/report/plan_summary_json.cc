// See plan_summary_json.h. Ratios are chosen / reference, each tokens/s by the simulated step
// where the planner simulated one (Candidate::TokensPerSecond), so every number of one summary
// compares like with like.
#include "report/plan_summary_json.h"

#include <nlohmann/json.hpp>

#include "perf/cross_island.h"
#include "sched/step_program.h"
#include "spec/plan_topology.h"

namespace motley::report {
namespace {

nlohmann::ordered_json CandidateJson(const plan::Candidate& c, int64_t tokens_per_step) {
  nlohmann::ordered_json j;
  j["description"] = c.description;
  j["tokens_per_s"] = c.TokensPerSecond(tokens_per_step);
  j["predicted_iteration_s"] = c.prediction.iteration_s;
  j["simulated_iteration_s"] =
      c.simulated_s > 0 ? nlohmann::ordered_json(c.simulated_s) : nlohmann::ordered_json();
  j["devices_used"] = spec::PlanDevices(c.plan).size();
  j["fits_memory"] = c.prediction.fits_memory;
  return j;
}

// tps / reference, or null when the reference was not computed.
nlohmann::ordered_json Ratio(double tps, double reference) {
  return reference > 0 ? nlohmann::ordered_json(tps / reference) : nlohmann::ordered_json();
}

}  // namespace

Result<std::string> PlanSummaryJson(const perf::Predictor& predictor,
                                    const plan::PlanReport& report, const plan::Candidate& written,
                                    const PlanningCost& cost) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  const int64_t tokens = report.tokens_per_step;
  const double tps = report.best.TokensPerSecond(tokens);
  nlohmann::ordered_json j;
  j["format"] = "motley-plan-summary";
  j["version"] = 2;  // 2: cross_island bytes as modelled (1: the runtime's f32 sizes)
  j["cluster"] = {{"name", cluster.name},
                  {"devices", cluster.num_devices()},
                  {"device_types", cluster.device_types.size()}};
  j["tokens_per_step"] = tokens;
  nlohmann::ordered_json chosen = CandidateJson(report.best, tokens);
  chosen["mfu_used"] = report.mfu_used;
  chosen["mfu_all"] = report.mfu_all;
  int idle = 0;
  for (const plan::LeftOutDevices& left : report.left_out)
    idle += static_cast<int>(left.devices.size());
  chosen["devices_idle"] = idle;
  j["chosen"] = chosen;
  j["written"] = written.description;
  MOTLEY_ASSIGN_OR_RETURN(
      const sched::StepProgram program,
      sched::BuildStepProgram(report.best.plan, predictor.model(), predictor.train().seq_len));
  const perf::CrossIslandTraffic cross =
      perf::CountCrossIslandTraffic(program, report.best.plan, predictor);
  nlohmann::ordered_json collectives = nlohmann::ordered_json::object();
  for (const auto& [kind, count] : cross.collectives) {
    collectives[kind] = {{"count", count},
                         {"buffer_bytes", cross.collective_buffer_bytes.at(kind)}};
  }
  j["cross_island"] = {{"islands", cluster.islands.size()},
                       {"pipeline_messages", cross.pipeline_messages},
                       {"pipeline_bytes", cross.pipeline_bytes},
                       {"collectives", collectives}};
  j["references"] = {
      {"compute_bound_tokens_per_s", report.compute_bound_tokens_per_s},
      {"compute_bound_ratio", Ratio(tps, report.compute_bound_tokens_per_s)},
      {"homogeneous_sum_tokens_per_s", report.homogeneous_sum_tokens_per_s},
      {"homogeneous_sum_ratio", Ratio(tps, report.homogeneous_sum_tokens_per_s)},
      {"exhaustive_tokens_per_s", report.exhaustive_tokens_per_s > 0
                                      ? nlohmann::ordered_json(report.exhaustive_tokens_per_s)
                                      : nlohmann::ordered_json()},
      // The exhaustive optimum is predicted: compared with the top-ranked candidate's prediction.
      {"exhaustive_ratio",
       report.exhaustive_tokens_per_s > 0 && !report.ranked.empty()
           ? Ratio(report.ranked.front().prediction.tokens_per_s, report.exhaustive_tokens_per_s)
           : nlohmann::ordered_json()}};
  nlohmann::ordered_json shares = nlohmann::ordered_json::array();
  for (const plan::TypeShare& s : report.homogeneous_shares) {
    shares.push_back({{"type", s.type_name},
                      {"devices", s.devices},
                      {"global_batch", s.global_batch},
                      {"tokens_per_s", s.tokens_per_s},
                      {"plan", s.what}});
  }
  j["homogeneous_shares"] = shares;
  nlohmann::ordered_json baselines = nlohmann::ordered_json::array();
  for (const plan::Baseline& b : report.baselines) {
    nlohmann::ordered_json entry = {
        {"kind", plan::BaselineKindName(b.kind)}, {"name", b.name}, {"found", b.found}};
    if (b.found) {
      entry["candidate"] = CandidateJson(b.candidate, tokens);
      entry["speedup"] = Ratio(tps, b.candidate.TokensPerSecond(tokens));
    } else {
      entry["why_not"] = b.why_not;
    }
    baselines.push_back(entry);
  }
  j["baselines"] = baselines;
  nlohmann::ordered_json left = nlohmann::ordered_json::array();
  for (const plan::LeftOutDevices& l : report.left_out) {
    left.push_back({{"type", l.type_name}, {"devices", l.devices}, {"reason", l.reason}});
  }
  j["left_out"] = left;
  nlohmann::ordered_json ranked = nlohmann::ordered_json::array();
  for (const plan::Candidate& c : report.ranked) ranked.push_back(CandidateJson(c, tokens));
  j["ranked"] = ranked;
  j["search"] = {{"layouts", report.layouts_considered},
                 {"evaluations", report.evaluations},
                 {"evaluations_pruned", report.evaluations_pruned},
                 {"wall_s", cost.wall_s},
                 {"cpu_s", cost.cpu_s}};
  return j.dump(2) + "\n";
}

}  // namespace motley::report
