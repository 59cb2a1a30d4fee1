// See trainer.h.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <memory>
#include <span>

#include <fmt/core.h>

#include "backend/cpu/cpu_backend.h"
#include "core/checked_math.h"
#include "core/thread_count.h"
#include "core/throughput.h"
#include "model/optimizer.h"
#include "model/stage.h"
#include "spec/model_flops.h"
#include "train/batch_sampler.h"
#include "train/dataset.h"
#include "train/evaluate.h"
#include "train/loss_spike.h"
#include "train/memory_check.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/trainer_checkpoint.h"

namespace motley::train {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Device-side token buffers of one micro-batch, (mb, T) i32 each, filled from host samples.
struct MicroBatchBuffers {
  tensor::Tensor inputs;
  tensor::Tensor targets;
};

// Runs samples [range.begin, range.begin + range.count) of the host batch (B, T) through the
// stage as micro-batch `mb`: forward with loss, then backward (train) or discard (eval).
double RunMicroBatch(model::Stage& stage, MicroBatchBuffers& buf, std::span<const int32_t> inputs,
                     std::span<const int32_t> targets, const SampleRange& range, int64_t seq_len,
                     int64_t mb, std::optional<float> loss_scale) {
  tensor::Backend& backend = stage.backend();
  const auto begin = static_cast<size_t>(range.begin * seq_len);
  const auto count = static_cast<size_t>(range.count * seq_len);
  backend.CopyFromHost(buf.inputs, inputs.data() + begin, count * sizeof(int32_t));
  backend.CopyFromHost(buf.targets, targets.data() + begin, count * sizeof(int32_t));
  const double loss_sum = stage.ForwardLoss(mb, buf.inputs, buf.targets);
  if (loss_scale) {
    stage.BackwardLoss(mb, *loss_scale);
  } else {
    stage.Discard(mb);
  }
  return loss_sum;
}

void Print(std::FILE* out, const std::string& text) {
  if (out == nullptr) return;
  fmt::print(out, "{}", text);
  std::fflush(out);
}

}  // namespace

Result<TrainSummary> Train(const spec::ModelSpec& model, const spec::TrainSpec& train,
                           const TrainerOptions& options) {
  const int64_t global_batch = train.global_batch;
  const int64_t seq_len = train.seq_len;
  const int64_t m = options.micro_batches;
  const Clock::time_point call_start = Clock::now();  // elapsed_s of the metrics counts from here
  if (global_batch <= 0 || seq_len <= 0 || train.steps <= 0) {
    return Err(StatusCode::kInvalidArgument,
               "train: global_batch, seq_len and steps must be positive (got {}, {}, {})",
               global_batch, seq_len, train.steps);
  }
  if (m < 1 || global_batch % m != 0) {
    return Err(StatusCode::kInvalidArgument,
               "train.global_batch: {} is not divisible into {} equal micro-batches", global_batch,
               m);
  }
  if (seq_len > model.max_seq_len) {
    return Err(StatusCode::kInvalidArgument, "train.seq_len: {} exceeds model.max_seq_len {}",
               seq_len, model.max_seq_len);
  }
  // Before any allocation: the whole model's state and one micro-batch against this host.
  const int64_t mb_size = global_batch / m;
  MOTLEY_ASSIGN_OR_RETURN(
      const StageMemory need,
      StageMemoryAtLeast(model, model::StageLayout::Full(model), mb_size, seq_len));
  // Host batch buffers: inputs and targets (B, T) i32 and the B sample offsets.
  const std::optional<int64_t> token_buffers = CheckedProduct({global_batch, seq_len, 2 * 4});
  const std::optional<int64_t> batch_buffers =
      token_buffers ? CheckedAdd(*token_buffers, global_batch * 8) : std::nullopt;
  if (!batch_buffers) {
    return Err(StatusCode::kInvalidArgument, "train.global_batch: {} x {} tokens overflow",
               global_batch, seq_len);
  }
  MOTLEY_RETURN_IF_ERROR(CheckFits("this host (serial training on the CPU)", need, *batch_buffers,
                                   static_cast<double>(HostMemoryBytes())));
  MOTLEY_ASSIGN_OR_RETURN(TokenSplits data, LoadTokenSplits(train.data, model.vocab_size, seq_len));

  TrainSummary summary;
  summary.threads = ThreadsOrAllCores(train.threads);
  backend::SetBlasThreads(summary.threads);  // one rank in this process: BLAS gets every thread
  backend::CpuBackend backend(summary.threads);

  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<model::Stage> stage,
                          model::Stage::Create(backend, model, model::StageLayout::Full(model),
                                               mb_size, seq_len, train.seed));
  model::Optimizer optimizer(backend, stage->params(), train.optimizer, train.steps);
  if (!options.resume.empty() && !options.init_from.empty()) {
    return Err(StatusCode::kInvalidArgument,
               "--resume and --init-from exclude each other (resume continues a run with its "
               "optimizer state; init-from starts a new one from weights)");
  }
  int64_t first_step = 1;
  std::optional<MetricsResume> metrics_resume;
  if (!options.resume.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(ResumePoint point, ResolveResume(options.resume, model, train));
    MOTLEY_RETURN_IF_ERROR(
        point.reader->LoadIntoStage(backend, stage->params(), true).WithContext("--resume"));
    first_step = point.metadata.step + 1;
    metrics_resume = MetricsResume{point.metadata.step, point.dir};
    Print(options.out, FormatResume(point));
  } else if (!options.init_from.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(CheckpointReader reader, OpenInitFrom(options.init_from, model));
    MOTLEY_RETURN_IF_ERROR(reader.LoadIntoStage(backend, stage->params(), /*load_optimizer=*/false)
                               .WithContext("--init-from"));
    Print(options.out, fmt::format("initialised from {} (weights only: a fresh optimizer, step "
                                   "1)\n",
                                   reader.Describe()));
  }
  MOTLEY_RETURN_IF_ERROR(PrepareCheckpointDir(
      train.checkpoint,
      metrics_resume ? std::optional<int64_t>(metrics_resume->step) : std::nullopt,
      options.overwrite, /*may_modify=*/true, options.out));
  summary.first_step = first_step;
  std::optional<StopSignalGuard> stop_guard;
  if (!train.checkpoint.dir.empty()) stop_guard.emplace();

  std::optional<MetricsWriter> metrics;
  if (!train.metrics_path.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(MetricsWriter writer,
                            MetricsWriter::Open(train.metrics_path, metrics_resume, call_start));
    metrics.emplace(std::move(writer));
  }

  summary.params = stage->params().numel();
  summary.non_embedding_params = model.NonEmbeddingParams();
  summary.flops_per_token = spec::ModelFlopsPerToken(model, seq_len);
  Print(options.out,
        fmt::format("model {} (L={} C={} NH={} NKV={} F={} V={}): {:.3f}M parameters, "
                    "{:.3f}M non-embedding\n"
                    "data: train {} ({} tokens), validation {} ({} tokens)\n"
                    "batch {} x {} tokens in {} micro-batch(es), {} steps, {} thread(s)\n",
                    model.name, model.num_blocks, model.hidden, model.num_heads, model.num_kv_heads,
                    model.ffn_hidden, model.vocab_size, static_cast<double>(summary.params) / 1e6,
                    static_cast<double>(summary.non_embedding_params) / 1e6, data.train_source,
                    data.train.size(), data.val_source, data.val.size(), global_batch, seq_len, m,
                    train.steps, summary.threads));

  std::FILE* out = options.out != nullptr ? options.out : stdout;
  const bool interactive =
      options.out != nullptr && options.interactive.value_or(ProgressReporter::IsTerminal(out));
  const int64_t log_every =
      options.log_every > 0 ? options.log_every : DefaultLogInterval(train.steps);
  std::optional<ProgressReporter> progress;
  if (options.out != nullptr) {
    progress.emplace(out, interactive, first_step, train.steps, log_every);
  }

  MicroBatchBuffers buf{backend.Empty(tensor::Shape{mb_size, seq_len}, tensor::DType::kI32),
                        backend.Empty(tensor::Shape{mb_size, seq_len}, tensor::DType::kI32)};
  std::vector<int32_t> inputs(static_cast<size_t>(global_batch * seq_len));
  std::vector<int32_t> targets(static_cast<size_t>(global_batch * seq_len));
  const std::vector<SampleRange> ranges = SplitBatch(global_batch, m);
  const auto tokens_per_step = global_batch * seq_len;
  const float loss_scale = 1.0F / static_cast<float>(tokens_per_step);
  const auto num_train = static_cast<int64_t>(data.train.size());
  const Clock::time_point run_start = Clock::now();

  LossSpikeDetector loss_spikes;
  for (int64_t step = first_step; step <= train.steps; ++step) {
    const Clock::time_point step_start = Clock::now();
    optimizer.ZeroGrads();
    // Sampling uses the 0-based step index; metrics and the LR schedule count from 1.
    const auto offsets = TrainBatchOffsets(train.seed, step - 1, global_batch, seq_len, num_train);
    GatherSamples(data.train, offsets, seq_len, inputs, targets);
    double loss_sum = 0.0;
    for (size_t i = 0; i < ranges.size(); ++i) {
      loss_sum += RunMicroBatch(*stage, buf, inputs, targets, ranges[i], seq_len,
                                static_cast<int64_t>(i), loss_scale);
    }
    const double loss = loss_sum / static_cast<double>(tokens_per_step);
    if (!std::isfinite(loss)) {
      if (progress) progress->Finish();
      return Err(
          "step {}: training loss is {} (not finite); the run diverged: lower "
          "train.optimizer.lr or set train.optimizer.grad_clip",
          step, loss);
    }
    const double grad_sq = optimizer.GradSquaredNorm();
    if (!std::isfinite(grad_sq)) {
      if (progress) progress->Finish();
      return Err("step {}: gradient norm is not finite (loss {:.4f}); the run diverged", step,
                 loss);
    }
    const float lr = optimizer.Step(step, model::ClipScale(grad_sq, train.optimizer.grad_clip));
    backend.Synchronize();

    StepMetrics sm;
    sm.step = step;
    sm.loss = loss;
    sm.lr = lr;
    sm.grad_norm = std::sqrt(grad_sq);
    sm.tokens = tokens_per_step;
    sm.step_time_s = SecondsSince(step_start);
    sm.tokens_per_s = TokensPerSecond(tokens_per_step, sm.step_time_s);
    sm.gflops = summary.flops_per_token * sm.tokens_per_s / 1e9;
    summary.train_time_s += sm.step_time_s;
    summary.tokens += tokens_per_step;
    if (step == first_step) summary.first_train_loss = loss;
    summary.final_train_loss = loss;
    summary.losses.push_back(loss);
    summary.steps = step - first_step + 1;

    const bool validate = train.val_every > 0 && train.val_batches > 0 &&
                          (step % train.val_every == 0 || step == train.steps);
    if (validate) {
      const double val_loss =
          MeanLoss(*stage, data.val, train.val_batches, global_batch, seq_len, ranges);
      sm.val_loss = val_loss;
      summary.val_history.emplace_back(step, val_loss);
      if (step == train.steps) summary.final_val_loss = val_loss;
    }
    sm.loss_spike = loss_spikes.Observe(loss);
    if (sm.loss_spike) summary.loss_spike_steps.push_back(step);
    if (metrics) MOTLEY_RETURN_IF_ERROR(metrics->Write(sm));
    if (progress) {
      ProgressStep line;
      line.step = step;
      line.loss = loss;
      line.lr = lr;
      line.grad_norm = sm.grad_norm;
      line.tokens = tokens_per_step;
      line.wall_step_s = sm.step_time_s;
      progress->Update(line, SecondsSince(run_start));
      if (sm.loss_spike) {
        progress->Note(fmt::format("step {}: LOSS SPIKE: loss {:.4f}, recent mean {:.4f}", step,
                                   loss, loss_spikes.mean()));
      }
      if (sm.val_loss) progress->Note(fmt::format("step {}: val_loss {:.4f}", step, *sm.val_loss));
    }
    if (stop_guard && step == options.sigterm_at_step) std::raise(options.test_signal);
    const bool stopping = stop_guard.has_value() && StopRequested();
    if (CheckpointDue(train.checkpoint, step, train.steps, stopping)) {
      SaveOptions save;
      save.keep_last = std::max<int64_t>(1, train.checkpoint.keep_last);
      Result<std::string> saved = SaveCheckpoint(
          train.checkpoint.dir, MakeCheckpointMetadata(model, train, step, global_batch, nullptr),
          {StageToSave(&backend, &stage->params())}, save);
      if (!saved.ok()) {
        if (progress) progress->Finish();
        return saved.status().WithContext(fmt::format("checkpoint of step {}", step));
      }
      summary.last_checkpoint = *saved;
      if (progress) {
        progress->Note(fmt::format("step {}: checkpoint {}", step, summary.last_checkpoint));
      }
    }
    if (stopping) {
      summary.stopped = true;
      summary.stop_signal = StopSignalName();
      if (progress) {
        progress->Note(fmt::format("step {}: {}: stopped after saving", step, summary.stop_signal));
      }
      break;
    }
  }
  if (progress) progress->Finish();
  summary.tokens_per_s = TokensPerSecond(summary.tokens, summary.train_time_s);
  summary.gflops = summary.flops_per_token * summary.tokens_per_s / 1e9;
  Print(options.out, FormatSummary(summary));
  return summary;
}

std::string FormatSummary(const TrainSummary& s) {
  std::string val = s.final_val_loss ? fmt::format("{:.4f}", *s.final_val_loss) : "not measured";
  return fmt::format(
      "done: {} steps, {} tokens in {:.2f} s of training ({} thread(s))\n"
      "loss: first step {:.4f}, final train {:.4f}, final validation {}\n"
      "throughput: {:.0f} tokens/s, {:.2f} GFLOP/s achieved ({:.3f} MFLOP per token = "
      "6N + 12LCT, N = {} non-embedding parameters)\n",
      s.steps, s.tokens, s.train_time_s, s.threads, s.first_train_loss, s.final_train_loss, val,
      s.tokens_per_s, s.gflops, s.flops_per_token / 1e6, s.non_embedding_params);
}

}  // namespace motley::train
