// The `train:` section of a run file -> TrainSpec, and its checks (declared in run_file.h).
#include <cmath>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "core/checked_math.h"
#include "spec/limits.h"
#include "spec/run_file.h"
#include "spec/spec_yaml.h"
#include "spec/train_spec.h"
#include "spec/yaml_reader.h"

namespace motley::spec {

Status ValidateTrainSpec(const TrainSpec& train, std::string_view where) {
  auto error = [&](std::string_view field, const std::string& reason) {
    return Err(StatusCode::kInvalidArgument, "{}.{}: {}", where, field, reason);
  };
  // An integer in [lo, hi].
  auto in_range = [&](const char* field, int64_t value, int64_t lo, int64_t hi) -> Status {
    if (value < lo || value > hi) {
      return error(field, value < lo && lo == 1
                              ? fmt::format("must be positive, got {}", value)
                              : fmt::format("must be in [{}, {}], got {}", lo, hi, value));
    }
    return Status::Ok();
  };
  auto non_negative = [&](const char* field, double value) -> Status {
    if (!(value >= 0) || !std::isfinite(value)) {
      return error(field, fmt::format("must be >= 0, got {}", value));
    }
    return Status::Ok();
  };
  MOTLEY_RETURN_IF_ERROR(in_range("global_batch", train.global_batch, 1, kMaxTokensPerStep));
  if (!(train.attention_dropout >= 0.0 && train.attention_dropout < 1.0)) {
    return error("attention_dropout",
                 fmt::format("must be in [0, 1), got {}", train.attention_dropout));
  }
  MOTLEY_RETURN_IF_ERROR(in_range("seq_len", train.seq_len, 1, kMaxSeqLen));
  MOTLEY_RETURN_IF_ERROR(in_range("steps", train.steps, 1, kMaxSteps));
  // Products, overflow-safe: tokens per step and of the whole run.
  const std::optional<int64_t> tokens = CheckedMul(train.global_batch, train.seq_len);
  if (!tokens || *tokens > kMaxTokensPerStep) {
    return error("global_batch",
                 fmt::format("{} sequences of train.seq_len {} tokens are more than {} tokens per "
                             "step",
                             train.global_batch, train.seq_len, kMaxTokensPerStep));
  }
  const std::optional<int64_t> run_tokens = CheckedMul(*tokens, train.steps);
  if (!run_tokens || *run_tokens > kMaxRunTokens) {
    return error("steps", fmt::format("{} steps of {} tokens are more than {} tokens in all",
                                      train.steps, *tokens, kMaxRunTokens));
  }
  const OptimizerSpec& o = train.optimizer;
  if (!(o.lr > 0.0F) || !std::isfinite(o.lr)) {
    return error("optimizer.lr", fmt::format("must be positive, got {}", o.lr));
  }
  MOTLEY_RETURN_IF_ERROR(non_negative("optimizer.min_lr", static_cast<double>(o.min_lr)));
  if (o.min_lr > o.lr) {
    return error("optimizer.min_lr", fmt::format("{} exceeds lr {}", o.min_lr, o.lr));
  }
  MOTLEY_RETURN_IF_ERROR(in_range("optimizer.warmup_steps", o.warmup_steps, 0, kMaxSteps));
  for (const auto& [field, beta] : {std::pair{"optimizer.beta1", o.beta1},
                                    std::pair{"optimizer.beta2", o.beta2}}) {
    if (!(beta >= 0.0F && beta < 1.0F)) {
      return error(field, fmt::format("must be in [0, 1), got {}", beta));
    }
  }
  if (!(o.eps > 0.0F) || !std::isfinite(o.eps)) {
    return error("optimizer.eps", fmt::format("must be positive, got {}", o.eps));
  }
  MOTLEY_RETURN_IF_ERROR(
      non_negative("optimizer.weight_decay", static_cast<double>(o.weight_decay)));
  MOTLEY_RETURN_IF_ERROR(non_negative("optimizer.grad_clip", static_cast<double>(o.grad_clip)));
  const DataSpec& d = train.data;
  if (d.format != "text" && d.format != "u16" && d.format != "u32") {
    return error("data.format",
                 fmt::format("unknown format '{}' (known: text, u16, u32)", d.format));
  }
  if (!(d.val_fraction >= 0 && d.val_fraction < 1)) {
    return error("data.val_fraction", fmt::format("must be in [0, 1), got {}", d.val_fraction));
  }
  MOTLEY_RETURN_IF_ERROR(in_range("val_every", train.val_every, 0, kMaxSteps));
  MOTLEY_RETURN_IF_ERROR(in_range("val_batches", train.val_batches, 0, kMaxSteps));
  if (train.val_every > 0 && train.val_batches == 0) {
    return error("val_batches", "must be positive when val_every is set");
  }
  const std::optional<int64_t> val_tokens = CheckedMul(*tokens, train.val_batches);
  if (!val_tokens || *val_tokens > kMaxRunTokens) {
    return error("val_batches", fmt::format("{} batches of {} tokens are more than {} tokens",
                                            train.val_batches, *tokens, kMaxRunTokens));
  }
  MOTLEY_RETURN_IF_ERROR(in_range("threads", train.threads, 0, kMaxThreads));
  MOTLEY_RETURN_IF_ERROR(
      in_range("checkpoint.every_steps", train.checkpoint.every_steps, 0, kMaxSteps));
  MOTLEY_RETURN_IF_ERROR(
      in_range("checkpoint.keep_last", train.checkpoint.keep_last, 1, kMaxSteps));
  return Status::Ok();
}

Status CheckRuntimeRunsKernels(const TrainSpec& train, std::string_view where) {
  if (train.precision && *train.precision != Precision::kFp32) {
    return Err(StatusCode::kFailedPrecondition,
               "{}.precision: '{}' is not run by motley's runtime (it computes in fp32; a CUDA "
               "stage takes bf16 matmuls from --cuda-bf16); the field is for plan, predict and "
               "simulate: remove it or set fp32 to train",
               where, PrecisionName(*train.precision));
  }
  if (train.attention && *train.attention != Attention::kUnfused) {
    return Err(StatusCode::kFailedPrecondition,
               "{}.attention: 'fused' is not run by motley's runtime (its attention is unfused); "
               "the field is for plan, predict and simulate: remove it or set unfused to train",
               where);
  }
  if (train.sequence_parallel.value_or(false)) {
    return Err(StatusCode::kFailedPrecondition,
               "{}.sequence_parallel: not run by motley's runtime (TP ranks keep whole "
               "activations); the field is for plan, predict and simulate: remove it or set "
               "false to train",
               where);
  }
  if (train.attention_dropout != 0.0) {
    return Err(StatusCode::kFailedPrecondition,
               "{}.attention_dropout: {} is not run by motley's runtime (it applies no dropout); "
               "the field is for plan, predict and simulate: remove it or set 0 to train",
               where, train.attention_dropout);
  }
  return Status::Ok();
}

namespace internal {
namespace {

std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path.front() == '/' || base_dir.empty()) return path;
  return base_dir + "/" + path;
}

}  // namespace

Result<TrainSpec> ParseTrainNode(const YAML::Node& node, const std::string& file,
                                 const std::string& path, const std::string& base_dir) {
  MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(node, file, path));
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys(
      {"global_batch", "seq_len", "steps", "seed", "optimizer", "data", "val_every", "val_batches",
       "metrics_path", "threads", "checkpoint", "precision", "attention", "sequence_parallel",
       "attention_dropout"}));
  TrainSpec t;
  MOTLEY_ASSIGN_OR_RETURN(t.global_batch, map.Int("global_batch"));
  MOTLEY_ASSIGN_OR_RETURN(t.seq_len, map.Int("seq_len"));
  MOTLEY_ASSIGN_OR_RETURN(t.steps, map.Int("steps"));
  MOTLEY_RETURN_IF_ERROR(map.OptUint("seed", &t.seed));
  MOTLEY_RETURN_IF_ERROR(map.OptInt("val_every", &t.val_every));
  MOTLEY_RETURN_IF_ERROR(map.OptInt("val_batches", &t.val_batches));
  MOTLEY_RETURN_IF_ERROR(map.OptString("metrics_path", &t.metrics_path));
  MOTLEY_RETURN_IF_ERROR(map.OptInt("threads", &t.threads));
  if (map.Has("precision")) {
    MOTLEY_ASSIGN_OR_RETURN(const std::string text, map.String("precision"));
    t.precision = ParsePrecision(text);
    if (!t.precision) {
      return map.Error("precision",
                       fmt::format("unknown precision '{}' (known: fp32, bf16, fp16)", text));
    }
  }
  if (map.Has("attention")) {
    MOTLEY_ASSIGN_OR_RETURN(const std::string text, map.String("attention"));
    t.attention = ParseAttention(text);
    if (!t.attention) {
      return map.Error("attention",
                       fmt::format("unknown attention kernel '{}' (known: unfused, fused)", text));
    }
  }
  if (map.Has("sequence_parallel")) {
    bool sp = false;
    MOTLEY_RETURN_IF_ERROR(map.OptBool("sequence_parallel", &sp));
    t.sequence_parallel = sp;
  }
  MOTLEY_RETURN_IF_ERROR(map.OptDouble("attention_dropout", &t.attention_dropout));
  if (map.Has("optimizer")) {
    MOTLEY_ASSIGN_OR_RETURN(const MapReader o,
                            MapReader::Make(map.Get("optimizer"), file, map.PathOf("optimizer")));
    MOTLEY_RETURN_IF_ERROR(o.CheckKeys({"lr", "min_lr", "warmup_steps", "beta1", "beta2", "eps",
                                        "weight_decay", "grad_clip"}));
    OptimizerSpec& s = t.optimizer;
    MOTLEY_RETURN_IF_ERROR(o.OptFloat("lr", &s.lr));
    MOTLEY_RETURN_IF_ERROR(o.OptFloat("min_lr", &s.min_lr));
    MOTLEY_RETURN_IF_ERROR(o.OptInt("warmup_steps", &s.warmup_steps));
    MOTLEY_RETURN_IF_ERROR(o.OptFloat("beta1", &s.beta1));
    MOTLEY_RETURN_IF_ERROR(o.OptFloat("beta2", &s.beta2));
    MOTLEY_RETURN_IF_ERROR(o.OptFloat("eps", &s.eps));
    MOTLEY_RETURN_IF_ERROR(o.OptFloat("weight_decay", &s.weight_decay));
    MOTLEY_RETURN_IF_ERROR(o.OptFloat("grad_clip", &s.grad_clip));
  }
  if (map.Has("data")) {
    MOTLEY_ASSIGN_OR_RETURN(const MapReader d,
                            MapReader::Make(map.Get("data"), file, map.PathOf("data")));
    MOTLEY_RETURN_IF_ERROR(d.CheckKeys({"format", "train_path", "val_path", "val_fraction"}));
    MOTLEY_RETURN_IF_ERROR(d.OptString("format", &t.data.format));
    MOTLEY_RETURN_IF_ERROR(d.OptString("train_path", &t.data.train_path));
    MOTLEY_RETURN_IF_ERROR(d.OptString("val_path", &t.data.val_path));
    MOTLEY_RETURN_IF_ERROR(d.OptDouble("val_fraction", &t.data.val_fraction));
    t.data.train_path = Resolve(base_dir, t.data.train_path);
    t.data.val_path = Resolve(base_dir, t.data.val_path);
  }
  if (map.Has("checkpoint")) {
    MOTLEY_ASSIGN_OR_RETURN(const MapReader c, MapReader::Make(map.Get("checkpoint"), file,
                                                               map.PathOf("checkpoint")));
    MOTLEY_RETURN_IF_ERROR(c.CheckKeys({"dir", "every_steps", "keep_last"}));
    MOTLEY_RETURN_IF_ERROR(c.OptString("dir", &t.checkpoint.dir));
    MOTLEY_RETURN_IF_ERROR(c.OptInt("every_steps", &t.checkpoint.every_steps));
    MOTLEY_RETURN_IF_ERROR(c.OptInt("keep_last", &t.checkpoint.keep_last));
  }
  MOTLEY_RETURN_IF_ERROR(ValidateTrainSpec(t, path.empty() ? file + ": train" : file + ": " + path));
  return t;
}

}  // namespace internal
}  // namespace motley::spec
