// Text generation from a checkpoint or a Hugging Face folder (`motley generate RUN.yaml
// --checkpoint DIR --prompt TEXT`):
// the weights are loaded (values only) into a whole-model body Stage (embedding + every block) and
// a head (final RMSNorm + LM head), and tokens are sampled one at a time from the byte tokenizer's
// encoding of the prompt, greedily (temperature 0) or from softmax(logits / temperature).
//
// The Stage runs a fixed window of `context` tokens; the last `context` tokens are fed (positions
// restart at 0 when the text is longer, a sliding window), positions past the text are padded, and
// causal attention makes the logits at the last real position independent of the padding. Only
// byte ids (0..255, and < V) are sampled, so the output always decodes.
// Ownership: a Generator borrows the Backend, which must outlive it. Thread safety: one caller.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/parameters.h"
#include "model/stage.h"
#include "spec/model_spec.h"
#include "tensor/backend.h"

namespace motley::train {

struct GenerateOptions {
  std::string prompt;
  int64_t max_new_tokens = 200;
  float temperature = 0.0F;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // temperature > 0: draw among the k most likely ids only (0: all)
  uint64_t seed = 0;         // sampling stream (temperature > 0)
  int64_t context = 0;       // window length T; 0: model.max_seq_len
};

class Generator {
 public:
  // Allocates the body and head for windows of `context` tokens (0: model.max_seq_len).
  static Result<std::unique_ptr<Generator>> Create(tensor::Backend& backend,
                                                   const spec::ModelSpec& model, int64_t context);
  // Loads the parameter values from a checkpoint folder or ROOT, or a Hugging Face folder
  // (checkpoint.h), checked against the model (CheckpointReader::OpenFor); moments are not read.
  // Returns what was loaded (CheckpointReader::Describe), for a load message.
  Result<std::string> LoadCheckpoint(const std::string& path);

  // Logits (V) of the token after `tokens` (non-empty; only the last `context` are used).
  std::vector<float> NextLogits(std::span<const int32_t> tokens);
  // The prompt followed by up to max_new_tokens sampled tokens, decoded; errors for an empty
  // prompt or prompt bytes outside the vocabulary.
  Result<std::string> Generate(const GenerateOptions& options);

  model::Stage& body() { return *body_; }
  model::ParameterSet& head() { return head_; }

 private:
  Generator(tensor::Backend& backend, const spec::ModelSpec& model,
            std::unique_ptr<model::Stage> body, model::ParameterSet head, int64_t context);

  tensor::Backend& backend_;
  spec::ModelSpec model_;
  std::unique_ptr<model::Stage> body_;
  model::ParameterSet head_;
  int64_t context_;
  tensor::Tensor tokens_;  // (1, T) i32
  tensor::Tensor ln_;      // (T, C)
  tensor::Tensor rstd_;    // (T)
  tensor::Tensor logits_;  // (T, V)
};

// Picks the next id from logits (V) over ids [0, limit): argmax when temperature is 0, else a draw
// from softmax(logits / temperature) using `uniform` in [0, 1), restricted to the ids whose logit
// is at least the top_k-th largest when top_k > 0 (ties at that value all stay).
int32_t SampleToken(std::span<const float> logits, int64_t limit, float temperature, double uniform,
                    int64_t top_k = 0);

// Convenience for the CLI: a CpuBackend, a Generator, the checkpoint, Generate. `loaded`, when
// given, receives LoadCheckpoint's description.
Result<std::string> GenerateFromCheckpoint(const spec::ModelSpec& model,
                                           const std::string& checkpoint,
                                           const GenerateOptions& options, int threads = 1,
                                           std::string* loaded = nullptr);

}  // namespace motley::train
