// Evaluation: the mean token loss of a model over fixed batches of a token split. One measurement
// serves the training loop's validation (trainer.h: val_loss) and `motley eval RUN.yaml
// --checkpoint DIR [--data FILE] [--batches N]`, which loads a checkpoint (motley's, any plan, or
// a Hugging Face folder) for the run's model and reports the loss and perplexity on the
// validation split or on a token file, writing nothing.
//
// Batch b of n is ValidationBatchOffsets(b, n, B, T, tokens) (batch_sampler.h): the n * B samples
// spread evenly from the start to the end of the split, the same at every measurement. The loss
// is sum of token cross-entropies / (n * B * T), nats per token; perplexity is exp(loss).
// Thread safety: one call per thread (EvaluateCheckpoint sets OpenBLAS's process-wide thread
// count).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/stage.h"
#include "spec/model_spec.h"
#include "spec/train_spec.h"
#include "train/batch_sampler.h"
#include "train/token_file.h"

namespace motley::train {

// Mean token loss of `stage` (the whole model: embedding, every block, head) over `num_batches`
// batches of `global_batch` samples of `seq_len` tokens from `tokens` (in memory or mapped), each batch run as the
// equal micro-batches `ranges` (of the stage's batch size). Forward passes only.
double MeanLoss(model::Stage& stage, const TokenSequence& tokens, int64_t num_batches,
                int64_t global_batch, int64_t seq_len, const std::vector<SampleRange>& ranges);

struct EvalOptions {
  std::string checkpoint;   // a checkpoint folder or ROOT, or a Hugging Face folder
  std::string data_path;    // a token file; empty: the validation split of train.data
  std::string data_format;  // "text", "u16" or "u32"; empty: train.data.format
  int64_t batches = 0;      // global batches; 0: train.val_batches (1 when that is 0)
  int threads = 1;
};

struct EvalResult {
  double loss = 0.0;        // nats per token
  double perplexity = 0.0;  // exp(loss)
  int64_t batches = 0;
  int64_t global_batch = 0;
  int64_t seq_len = 0;
  int64_t tokens = 0;       // batches * B * T
  std::string data_source;  // the file (and split) evaluated on
  std::string checkpoint;   // what was loaded (CheckpointReader::Describe)
};

// Loads `options.checkpoint` for `model` (weights only; another model is refused naming the
// field) and measures MeanLoss with train.global_batch and train.seq_len. Errors name the
// checkpoint, the data file or the option.
Result<EvalResult> EvaluateCheckpoint(const spec::ModelSpec& model, const spec::TrainSpec& train,
                                      const EvalOptions& options);

}  // namespace motley::train
