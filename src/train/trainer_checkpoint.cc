// See trainer_checkpoint.h.
#include "train/trainer_checkpoint.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include <fmt/core.h>

#include "model/optimizer.h"
#include "train/checkpoint/checkpoint_paths.h"
#include "train/checkpoint/sha256.h"

namespace motley::train {
namespace {

std::atomic<int> g_stop_signal{0};  // the signal that asked for the stop; 0: none
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

void WriteToStderr(const char* text) {
  size_t n = 0;
  while (text[n] != '\0') ++n;
  ssize_t ignored = ::write(STDERR_FILENO, text, n);  // async-signal-safe
  (void)ignored;
}

extern "C" void OnStopSignal(int signal) {
  int none = 0;
  if (g_stop_signal.compare_exchange_strong(none, signal)) {
    WriteToStderr(signal == SIGINT
                      ? "\nmotley: SIGINT: stopping at the end of this step after saving a "
                        "checkpoint (Ctrl-C again aborts without saving)\n"
                      : "\nmotley: SIGTERM: stopping at the end of this step after saving a "
                        "checkpoint\n");
    return;
  }
  if (signal != SIGINT) return;  // a repeated SIGTERM: the stop is under way
  WriteToStderr("\nmotley: SIGINT again: aborting without saving\n");
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(SIGINT, &default_action, nullptr);
  ::raise(SIGINT);  // delivered when this handler returns: the default action ends the process
}

// A float as the double of its shortest decimal form (3e-4F is written 0.0003).
double ShortestDouble(float f) {
  return std::strtod(fmt::format("{}", f).c_str(), nullptr);
}

nlohmann::json OptimizerToJson(const spec::OptimizerSpec& o) {
  return {{"lr", ShortestDouble(o.lr)},       {"min_lr", ShortestDouble(o.min_lr)},
          {"warmup_steps", o.warmup_steps},   {"weight_decay", ShortestDouble(o.weight_decay)},
          {"beta1", ShortestDouble(o.beta1)}, {"beta2", ShortestDouble(o.beta2)},
          {"eps", ShortestDouble(o.eps)},     {"grad_clip", ShortestDouble(o.grad_clip)}};
}

// The recorded optimizer settings (each absent field keeps `base`'s value).
spec::OptimizerSpec OptimizerFromJson(const nlohmann::json& j, spec::OptimizerSpec base) {
  auto number = [&](const char* key, float* out) {
    if (j.contains(key) && j[key].is_number()) *out = static_cast<float>(j[key].get<double>());
  };
  number("lr", &base.lr);
  number("min_lr", &base.min_lr);
  if (j.contains("warmup_steps") && j["warmup_steps"].is_number_integer()) {
    base.warmup_steps = j["warmup_steps"].get<int64_t>();
  }
  number("weight_decay", &base.weight_decay);
  number("beta1", &base.beta1);
  number("beta2", &base.beta2);
  number("eps", &base.eps);
  number("grad_clip", &base.grad_clip);
  return base;
}

std::string ScheduleText(const spec::OptimizerSpec& o, int64_t steps) {
  const std::string warmup =
      o.warmup_steps > 0 ? fmt::format("{} warm-up steps, then ", o.warmup_steps) : "";
  return fmt::format("{}cosine from lr {} to min_lr {} at step {}", warmup, o.lr, o.min_lr, steps);
}

// The lines of the training settings that differ (train.steps excluded) and the learning-rate
// line, for a resume at `metadata.step + 1` under `train`.
void DescribeResume(const CheckpointMetadata& md, const spec::TrainSpec& train,
                    ResumePoint* point) {
  const nlohmann::json now = TrainConfigToJson(train);
  const nlohmann::json& then = md.train;
  auto compare = [&](const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix) {
    for (const auto& [key, value] : b.items()) {
      if (key == "steps" || key == "optimizer" || !a.contains(key)) continue;
      if (a[key] != value) {
        point->differences.push_back(fmt::format("{}{}: {} in the checkpoint's run, {} now", prefix,
                                                 key, a[key].dump(), value.dump()));
      }
    }
  };
  compare(then, now, "train.");
  if (then.contains("optimizer") && then["optimizer"].is_object()) {
    compare(then["optimizer"], now["optimizer"], "train.optimizer.");
  }

  const int64_t next = md.step + 1;
  const float lr_next = model::LearningRate(train.optimizer, next, train.steps);
  const std::string schedule = ScheduleText(train.optimizer, train.steps);
  if (!then.contains("steps") || !then["steps"].is_number_integer()) {
    point->lr_schedule = fmt::format(
        "learning rate: step {} runs at {:.3e} on this run's schedule "
        "({}; the checkpoint does not record its own)",
        next, lr_next, schedule);
    return;
  }
  const int64_t then_steps = then["steps"].get<int64_t>();
  const spec::OptimizerSpec then_opt = then.contains("optimizer")
                                           ? OptimizerFromJson(then["optimizer"], train.optimizer)
                                           : train.optimizer;
  const float lr_last = model::LearningRate(then_opt, md.step, then_steps);
  const bool same =
      then_steps == train.steps && then.value("optimizer", nlohmann::json()) == now["optimizer"];
  if (same) {
    point->lr_schedule = fmt::format(
        "learning rate: the schedule continues unchanged ({}): step {} ran at {:.3e}, step {} "
        "runs at {:.3e}",
        schedule, md.step, lr_last, next, lr_next);
  } else {
    point->lr_schedule = fmt::format(
        "learning rate: this run's schedule applies from step {} ({}; the checkpoint's run "
        "had {}): step {} ran at {:.3e}, step {} runs at {:.3e}",
        next, schedule, ScheduleText(then_opt, then_steps), md.step, lr_last, next, lr_next);
  }
}

}  // namespace

StopSignalGuard::StopSignalGuard() {
  ClearStopRequest();
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  installed_ = sigaction(SIGTERM, &action, &previous_term_) == 0 &&
               sigaction(SIGINT, &action, &previous_int_) == 0;
}

StopSignalGuard::~StopSignalGuard() {
  if (!installed_) return;
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
}

bool StopRequested() {
  return g_stop_signal.load(std::memory_order_relaxed) != 0;
}

const char* StopSignalName() {
  switch (g_stop_signal.load(std::memory_order_relaxed)) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case 0: return "";
    default: return "a signal";
  }
}

void ClearStopRequest() {
  g_stop_signal.store(0, std::memory_order_relaxed);
}

bool CheckpointDue(const spec::CheckpointSpec& ckpt, int64_t step, int64_t last_step,
                   bool stopping) {
  if (ckpt.dir.empty()) return false;
  if (stopping || step == last_step) return true;
  return ckpt.every_steps > 0 && step % ckpt.every_steps == 0;
}

std::string TrainConfigHash(const spec::ModelSpec& m, const spec::TrainSpec& t) {
  const nlohmann::ordered_json j = {
      {"model",
       {m.num_blocks, m.hidden, m.num_heads, m.num_kv_heads, m.ffn_hidden, m.vocab_size,
        m.max_seq_len}},
      {"seed", t.seed},
      {"global_batch", t.global_batch},
      {"seq_len", t.seq_len},
      {"steps", t.steps},
      {"optimizer",
       {t.optimizer.lr, t.optimizer.min_lr, t.optimizer.warmup_steps, t.optimizer.weight_decay,
        t.optimizer.beta1, t.optimizer.beta2, t.optimizer.eps, t.optimizer.grad_clip}}};
  return Sha256Hex(j.dump());
}

nlohmann::json TrainConfigToJson(const spec::TrainSpec& t) {
  return {{"seed", t.seed},
          {"global_batch", t.global_batch},
          {"seq_len", t.seq_len},
          {"steps", t.steps},
          {"optimizer", OptimizerToJson(t.optimizer)}};
}

CheckpointMetadata MakeCheckpointMetadata(const spec::ModelSpec& model,
                                          const spec::TrainSpec& train, int64_t step,
                                          int64_t global_batch, nlohmann::json plan) {
  CheckpointMetadata md;
  md.step = step;
  md.consumed_samples = step * global_batch;
  md.config_hash = TrainConfigHash(model, train);
  md.model = model;
  md.train = TrainConfigToJson(train);
  md.rng = {{"seed", train.seed}};
  md.data_loader = {{"sampler", "seed+step"}, {"next_step", step + 1}};
  md.plan = std::move(plan);
  return md;
}

Status PrepareCheckpointDir(const spec::CheckpointSpec& ckpt, std::optional<int64_t> resumed_step,
                            bool overwrite, bool may_modify, std::FILE* out) {
  if (ckpt.dir.empty()) return Status::Ok();
  const std::string& dir = ckpt.dir;
  MOTLEY_RETURN_IF_ERROR(CheckCheckpointRoot(dir).WithContext("train.checkpoint.dir"));
  const std::optional<int64_t> latest = LatestStep(dir);
  if (resumed_step) {
    if (latest && *latest > *resumed_step) {
      return Err(StatusCode::kFailedPrecondition,
                 "train.checkpoint.dir: {}/{} names {}, newer than the checkpoint this run "
                 "resumes (step {}): its saves would move `latest` backwards; resume from the "
                 "folder's latest checkpoint, or save into another folder",
                 dir, kLatestFile, CheckpointDirName(*latest), *resumed_step);
    }
    return Status::Ok();
  }
  // Complete checkpoints: motley's (marked) and unmarked ones (an older motley's, or not ours).
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto marked = MarkedCheckpoints(dir);
  std::vector<std::string> unmarked;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (internal::ParseCheckpointDirName(name) && fs::exists(entry.path() / kSidecarFile, ec) &&
        !fs::exists(entry.path() / kMarkerFile, ec)) {
      unmarked.push_back(name);
    }
  }
  if (!latest && marked.empty() && unmarked.empty()) return Status::Ok();
  const std::string newest = latest ? CheckpointDirName(*latest)
                                    : (!marked.empty() ? marked.back().second : unmarked.front());
  if (!overwrite) {
    return Err(StatusCode::kFailedPrecondition,
               "train.checkpoint.dir: {} already holds checkpoints (newest: {}): a fresh run "
               "would mix its checkpoints with them; continue that run with --resume, start over "
               "with --overwrite (deletes the checkpoints motley wrote there), or choose another "
               "folder",
               dir, newest);
  }
  if (!unmarked.empty()) {
    return Err(StatusCode::kFailedPrecondition,
               "train.checkpoint.dir: {}/{} holds a checkpoint without motley's '{}' marker file "
               "(an older motley's, or not motley's): --overwrite never deletes it; move it away",
               dir, unmarked.front(), kMarkerFile);
  }
  if (!may_modify) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(int removed, RemoveMarkedCheckpoints(dir));
  if (out != nullptr) {
    fmt::print(out, "--overwrite: removed {} checkpoint folder(s) and `{}` from {}\n", removed,
               kLatestFile, dir);
    std::fflush(out);
  }
  return Status::Ok();
}

Result<ResumePoint> ResolveResume(const std::string& path, const spec::ModelSpec& model,
                                  const spec::TrainSpec& train) {
  if (path.empty()) {
    return Err(StatusCode::kInvalidArgument,
               "--resume: no checkpoint folder (set train.checkpoint.dir)");
  }
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Err(StatusCode::kNotFound, "--resume: {}: no such checkpoint folder", path);
  }
  Result<CheckpointReader> reader = CheckpointReader::OpenFor(path, model);
  if (!reader.ok()) return reader.status().WithContext("--resume");
  if (reader->kind() != CheckpointReader::Kind::kMotley) {
    return Err(StatusCode::kInvalidArgument,
               "--resume: {}: a Hugging Face folder holds weights only: start from it with "
               "--init-from",
               reader->dir());
  }
  ResumePoint point{reader->dir(),
                    reader->metadata(),
                    std::make_shared<const CheckpointReader>(std::move(*reader)),
                    {},
                    {}};
  if (!point.reader->has_optimizer_state()) {
    return Err(StatusCode::kInvalidArgument,
               "--resume: {}: the checkpoint holds no optimizer state (start from its weights "
               "with --init-from)",
               point.dir);
  }
  if (point.metadata.step >= train.steps) {
    return Err(StatusCode::kInvalidArgument,
               "--resume: {}: the checkpoint is at step {}, train.steps is {}: nothing left to "
               "train (raise train.steps)",
               point.dir, point.metadata.step, train.steps);
  }
  DescribeResume(point.metadata, train, &point);
  return point;
}

std::string FormatResume(const ResumePoint& point) {
  std::string text = fmt::format("resumed from {} (step {}); continuing at step {}\n", point.dir,
                                 point.metadata.step, point.metadata.step + 1);
  for (const std::string& d : point.differences) {
    text += fmt::format("note: {} (the trajectory differs from an uninterrupted run)\n", d);
  }
  text += point.lr_schedule + "\n";
  return text;
}

Result<CheckpointReader> OpenInitFrom(const std::string& path, const spec::ModelSpec& model) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Err(StatusCode::kNotFound, "--init-from: {}: no such folder", path);
  }
  Result<CheckpointReader> reader = CheckpointReader::OpenFor(path, model);
  if (!reader.ok()) return reader.status().WithContext("--init-from");
  return reader;
}

}  // namespace motley::train
