// See evaluate.h.
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/core.h>

#include "backend/cpu/cpu_backend.h"
#include "train/checkpoint/checkpoint.h"
#include "train/dataset.h"
#include "train/token_file.h"

namespace motley::train {

double MeanLoss(model::Stage& stage, const TokenSequence& tokens, int64_t num_batches,
                int64_t global_batch, int64_t seq_len, const std::vector<SampleRange>& ranges) {
  tensor::Backend& backend = stage.backend();
  MOTLEY_CHECK(!ranges.empty(), "MeanLoss: no micro-batches");
  const int64_t mb_size = ranges.front().count;
  for (const SampleRange& r : ranges) {
    MOTLEY_CHECK(r.count == mb_size, "MeanLoss: micro-batches of unequal sizes");
  }
  tensor::Tensor in = backend.Empty(tensor::Shape{mb_size, seq_len}, tensor::DType::kI32);
  tensor::Tensor tg = backend.Empty(tensor::Shape{mb_size, seq_len}, tensor::DType::kI32);
  std::vector<int32_t> inputs(static_cast<size_t>(global_batch * seq_len));
  std::vector<int32_t> targets(static_cast<size_t>(global_batch * seq_len));
  const auto n = static_cast<int64_t>(tokens.size());
  double loss_sum = 0.0;
  for (int64_t b = 0; b < num_batches; ++b) {
    const std::vector<int64_t> offsets =
        ValidationBatchOffsets(b, num_batches, global_batch, seq_len, n);
    GatherSamples(tokens, offsets, seq_len, inputs, targets);
    for (size_t m = 0; m < ranges.size(); ++m) {
      const SampleRange& r = ranges[m];
      const auto begin = static_cast<size_t>(r.begin * seq_len);
      const auto count = static_cast<size_t>(r.count * seq_len);
      backend.CopyFromHost(in, inputs.data() + begin, count * sizeof(int32_t));
      backend.CopyFromHost(tg, targets.data() + begin, count * sizeof(int32_t));
      loss_sum += stage.ForwardLoss(static_cast<int64_t>(m), in, tg);
      stage.Discard(static_cast<int64_t>(m));
    }
  }
  return loss_sum / static_cast<double>(num_batches * global_batch * seq_len);
}

Result<EvalResult> EvaluateCheckpoint(const spec::ModelSpec& model, const spec::TrainSpec& train,
                                      const EvalOptions& options) {
  const int64_t B = train.global_batch;
  const int64_t T = train.seq_len;
  if (B <= 0 || T <= 0) {
    return Err(StatusCode::kInvalidArgument,
               "train.global_batch and train.seq_len must be positive (got {}, {})", B, T);
  }
  if (T > model.max_seq_len) {
    return Err(StatusCode::kInvalidArgument, "train.seq_len: {} exceeds model.max_seq_len {}", T,
               model.max_seq_len);
  }
  if (options.batches < 0) {
    return Err(StatusCode::kInvalidArgument, "--batches: must be positive, got {}",
               options.batches);
  }
  EvalResult result;
  result.batches = options.batches > 0 ? options.batches : std::max<int64_t>(1, train.val_batches);
  result.global_batch = B;
  result.seq_len = T;
  result.tokens = result.batches * B * T;

  TokenSequence tokens;
  if (options.data_path.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(TokenSplits splits, LoadTokenSplits(train.data, model.vocab_size, T));
    tokens = std::move(splits.val);
    result.data_source = fmt::format("validation split {}", splits.val_source);
  } else {
    const std::string format =
        options.data_format.empty() ? train.data.format : options.data_format;
    Result<TokenFormat> parsed = ParseTokenFormat(format);
    if (!parsed.ok()) return parsed.status().WithCode(StatusCode::kInvalidArgument);
    MOTLEY_ASSIGN_OR_RETURN(tokens, OpenTokenFile(options.data_path, *parsed, model.vocab_size));
    if (static_cast<int64_t>(tokens.size()) < T + 1) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: {} tokens, fewer than one sample of train.seq_len + 1 = {}",
                 options.data_path, tokens.size(), T + 1);
    }
    result.data_source = fmt::format("{} ({} tokens, {})", options.data_path, tokens.size(),
                                     TokenFormatName(*parsed));
  }

  backend::SetBlasThreads(std::max(1, options.threads));
  backend::CpuBackend backend(std::max(1, options.threads));
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<model::Stage> stage,
      model::Stage::Create(backend, model, model::StageLayout::Full(model), B, T, train.seed));
  MOTLEY_ASSIGN_OR_RETURN(CheckpointReader reader,
                          CheckpointReader::OpenFor(options.checkpoint, model));
  MOTLEY_RETURN_IF_ERROR(reader.LoadIntoStage(backend, stage->params(), /*load_optimizer=*/false));
  result.checkpoint = reader.Describe();
  result.loss = MeanLoss(*stage, tokens, result.batches, B, T, SplitBatch(B, 1));
  result.perplexity = std::exp(result.loss);
  return result;
}

}  // namespace motley::train
