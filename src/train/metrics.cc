// See metrics.h.
#include "train/metrics.h"

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

namespace motley::train {

std::string StepMetricsToJson(const StepMetrics& m) {
  nlohmann::ordered_json j;
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
  return j.dump();
}

Result<MetricsWriter> MetricsWriter::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Err("{}: cannot create metrics file: {}", path, std::strerror(errno));
  return MetricsWriter(path, f);
}

Status MetricsWriter::Write(const StepMetrics& m) {
  const std::string line = StepMetricsToJson(m) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_.get()) != line.size() ||
      std::fflush(file_.get()) != 0) {
    return Err("{}: cannot write metrics: {}", path_, std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace motley::train
