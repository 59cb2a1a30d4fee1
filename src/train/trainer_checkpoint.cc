// See trainer_checkpoint.h.
#include "train/trainer_checkpoint.h"

#include <atomic>
#include <filesystem>
#include <utility>

#include <fmt/core.h>

#include "train/checkpoint/sha256.h"

namespace motley::train {
namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void OnSigterm(int /*signal*/) { g_stop.store(true, std::memory_order_relaxed); }

}  // namespace

StopSignalGuard::StopSignalGuard() {
  ClearStopRequest();
  struct sigaction action {};
  action.sa_handler = OnSigterm;
  sigemptyset(&action.sa_mask);
  installed_ = sigaction(SIGTERM, &action, &previous_) == 0;
}

StopSignalGuard::~StopSignalGuard() {
  if (installed_) sigaction(SIGTERM, &previous_, nullptr);
}

bool StopRequested() { return g_stop.load(std::memory_order_relaxed); }
void ClearStopRequest() { g_stop.store(false, std::memory_order_relaxed); }

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

CheckpointMetadata MakeCheckpointMetadata(const spec::ModelSpec& model,
                                          const spec::TrainSpec& train, int64_t step,
                                          int64_t global_batch, nlohmann::json plan) {
  CheckpointMetadata md;
  md.step = step;
  md.consumed_samples = step * global_batch;
  md.config_hash = TrainConfigHash(model, train);
  md.rng = {{"seed", train.seed}};
  md.data_loader = {{"sampler", "seed+step"}, {"next_step", step + 1}};
  md.plan = std::move(plan);
  return md;
}

Result<ResumePoint> ResolveResume(const std::string& path, const spec::TrainSpec& train) {
  if (path.empty()) return Err("--resume: no checkpoint folder (set train.checkpoint.dir)");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Err("--resume: {}: no such checkpoint folder", path);
  }
  MOTLEY_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(path));
  ResumePoint point{reader.dir(), reader.metadata()};
  if (!reader.has_optimizer_state()) {
    return Err("--resume: {}: the checkpoint holds no optimizer state", point.dir);
  }
  if (point.metadata.step >= train.steps) {
    return Err("--resume: {}: the checkpoint is at step {}, train.steps is {}: nothing left to "
               "train (raise train.steps)",
               point.dir, point.metadata.step, train.steps);
  }
  return point;
}

}  // namespace motley::train
