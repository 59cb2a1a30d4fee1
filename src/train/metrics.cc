// See metrics.h.
#include "train/metrics.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/core.h>

#include "core/file_util.h"

namespace motley::train {

using nlohmann::ordered_json;

ordered_json StepMetricsJson(const StepMetrics& m) {
  ordered_json j;
  j["step"] = m.step;
  j["loss"] = m.loss;
  j["lr"] = m.lr;
  j["grad_norm"] = m.grad_norm;
  j["tokens"] = m.tokens;
  j["step_time_s"] = m.step_time_s;
  j["tokens_per_s"] = m.tokens_per_s;
  j["gflops"] = m.gflops;
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  j["loss_spike"] = m.loss_spike;
  return j;
}

std::string StepMetricsToJson(const StepMetrics& m) {
  return StepMetricsJson(m).dump();
}

std::string IsoTimestampUtc(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000 - (ms % 1000 < 0 ? 1 : 0));
  const int64_t millis = ((ms % 1000) + 1000) % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  return fmt::format("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:03d}Z", utc.tm_year + 1900,
                     utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
}

namespace {

// The kept part of a metrics file a run resumes after `step`: every complete line except those of
// later steps (a line whose "step" is an integer > step) and earlier resume records at or after
// it (a resume that trained steps this one trains again). Lines that are not JSON objects are
// kept; a last line without its newline (a crash mid-write) is dropped.
std::string KeptLines(const std::string& text, int64_t step) {
  std::string kept;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // partial last line
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) {
      const bool resume_record = j.contains("event") && j["event"] == "resume";
      const int64_t at = j["step"].get<int64_t>();
      if (at > step || (resume_record && at >= step)) continue;
    }
    kept += line + "\n";
  }
  return kept;
}

}  // namespace

Result<MetricsWriter> MetricsWriter::Open(const std::string& path,
                                          const std::optional<MetricsResume>& resume,
                                          SteadyClock::time_point run_start) {
  if (resume) {
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(path, ec))) {
      MOTLEY_RETURN_IF_ERROR(CheckOutputTarget(path).WithContext("metrics file"));
      MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
      const std::string kept = KeptLines(text, resume->step);
      if (kept != text) MOTLEY_RETURN_IF_ERROR(WriteFileAtomic(path, kept));
    }
  }
  Result<std::FILE*> f = OpenOutputFile(path, /*append=*/resume.has_value());
  if (!f.ok()) return f.status().WithContext("metrics file");
  MetricsWriter writer(path, *f, run_start);
  if (resume) {
    ordered_json record;
    record["event"] = "resume";
    record["step"] = resume->step;
    record["from"] = resume->from;
    MOTLEY_RETURN_IF_ERROR(writer.WriteLine(record));
  }
  return writer;
}

Status MetricsWriter::Write(const StepMetrics& m) {
  return WriteLine(StepMetricsJson(m));
}

Status MetricsWriter::WriteLine(const ordered_json& line) {
  const std::string timestamp = IsoTimestampUtc(std::chrono::system_clock::now());
  const double elapsed_s = std::chrono::duration<double>(SteadyClock::now() - start_).count();
  ordered_json out;
  bool stamped = false;
  for (const auto& [key, value] : line.items()) {
    out[key] = value;
    if (key == "step" && !stamped) {
      out["timestamp"] = timestamp;
      out["elapsed_s"] = elapsed_s;
      stamped = true;
    }
  }
  if (!stamped) {
    out["timestamp"] = timestamp;
    out["elapsed_s"] = elapsed_s;
  }
  const std::string text = out.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_.get()) != text.size() ||
      std::fflush(file_.get()) != 0) {
    const int err = errno;
    return Err(CodeForErrno(err, FileAccess::kWrite), "{}: cannot write metrics: {}", path_,
               std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace motley::train
