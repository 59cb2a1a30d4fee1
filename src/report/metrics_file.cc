// See metrics_file.h.
#include "report/metrics_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/throughput.h"

namespace motley::report {
namespace {

std::optional<double> Number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string Text(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool Flag(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

Result<RunMetrics> ParseMetrics(std::string_view text, const std::string& name,
                                const std::string& label) {
  RunMetrics run;
  run.label = label;
  run.path = name;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return Err(StatusCode::kInvalidArgument, "{}:{}: not a JSON object", name, line_no);
    }
    const std::string event = Text(j, "event");
    if (!event.empty()) {
      if (event == "resume") {
        ResumeRecord r;
        r.step = static_cast<int64_t>(Number(j, "step").value_or(0));
        r.from = Text(j, "from");
        r.timestamp = Text(j, "timestamp");
        r.row = run.rows.size();
        run.resumes.push_back(std::move(r));
      }
      continue;  // other events carry no step values
    }
    const std::optional<double> step = Number(j, "step");
    const std::optional<double> loss = Number(j, "loss");
    if (!step || !loss) {
      return Err(StatusCode::kInvalidArgument, "{}:{}: a step line needs numeric 'step' and 'loss'",
                 name, line_no);
    }
    MetricsRow r;
    r.step = static_cast<int64_t>(*step);
    r.loss = *loss;
    r.val_loss = Number(j, "val_loss");
    r.tokens = static_cast<int64_t>(Number(j, "tokens").value_or(0));
    r.step_time_s = Number(j, "step_time_s").value_or(0.0);
    r.tokens_per_s = Number(j, "tokens_per_s").value_or(TokensPerSecond(r.tokens, r.step_time_s));
    r.wall_step_time_s = Number(j, "wall_step_time_s").value_or(r.step_time_s);
    r.predicted_step_time_s = Number(j, "predicted_step_time_s");
    r.elapsed_s = Number(j, "elapsed_s");
    r.timestamp = Text(j, "timestamp");
    r.skipped = Flag(j, "skipped");
    r.loss_spike = Flag(j, "loss_spike");
    r.plan = Text(j, "plan");
    if (run.clock.empty()) run.clock = Text(j, "clock");
    run.rows.push_back(std::move(r));
  }
  // The wall-time axis.
  bool all_elapsed = !run.rows.empty();
  for (const MetricsRow& r : run.rows) all_elapsed = all_elapsed && r.elapsed_s.has_value();
  run.wall_from_elapsed = all_elapsed;
  double offset = 0.0, previous = 0.0, sum = 0.0;
  for (MetricsRow& r : run.rows) {
    if (all_elapsed) {
      if (*r.elapsed_s < previous) offset += previous;  // a new process started from 0
      previous = *r.elapsed_s;
      r.wall_s = offset + *r.elapsed_s;
    } else {
      sum += r.wall_step_time_s;
      r.wall_s = sum;
    }
  }
  return run;
}

Result<RunMetrics> ReadMetricsFile(const std::string& path, const std::string& label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Err(StatusCode::kNotFound, "{}: cannot open the metrics file: {}", path,
               std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Err("{}: read error", path);
  const std::string name = label.empty() ? std::filesystem::path(path).stem().string() : label;
  return ParseMetrics(text.str(), path, name);
}

}  // namespace motley::report
