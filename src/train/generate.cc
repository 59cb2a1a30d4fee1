// See generate.h.
#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include <fmt/core.h>

#include "backend/cpu/cpu_backend.h"
#include "train/byte_tokenizer.h"
#include "train/checkpoint/checkpoint.h"

namespace motley::train {

using tensor::DType;
using tensor::Shape;

Result<std::unique_ptr<Generator>> Generator::Create(tensor::Backend& backend,
                                                     const spec::ModelSpec& model,
                                                     int64_t context) {
  const int64_t t = context > 0 ? context : model.max_seq_len;
  if (t <= 0) return Err("generate: context: must be positive (model.max_seq_len is {})", t);
  if (model.max_seq_len > 0 && t > model.max_seq_len) {
    return Err("generate: context {} exceeds model.max_seq_len {}", t, model.max_seq_len);
  }
  const model::StageLayout body_layout{0, model.num_blocks, true, false};
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<model::Stage> body,
                          model::Stage::Create(backend, model, body_layout, 1, t, /*seed=*/0));
  model::ParameterSet head = model::ParameterSet::Allocate(
      backend, model::StageParamInfos(model, model::StageLayout{0, 0, false, true}));
  return std::unique_ptr<Generator>(
      new Generator(backend, model, std::move(body), std::move(head), t));
}

Generator::Generator(tensor::Backend& backend, const spec::ModelSpec& model,
                     std::unique_ptr<model::Stage> body, model::ParameterSet head, int64_t context)
    : backend_(backend),
      model_(model),
      body_(std::move(body)),
      head_(std::move(head)),
      context_(context),
      tokens_(backend.Zeros(Shape{1, context}, DType::kI32)),
      ln_(backend.Empty(Shape{context, model.hidden}, DType::kF32)),
      rstd_(backend.Empty(Shape{context}, DType::kF32)),
      logits_(backend.Empty(Shape{context, model.vocab_size}, DType::kF32)) {}

Result<std::string> Generator::LoadCheckpoint(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::OpenFor(path, model_));
  MOTLEY_RETURN_IF_ERROR(reader.LoadIntoStage(backend_, body_->params(), false));
  MOTLEY_RETURN_IF_ERROR(reader.LoadIntoStage(backend_, head_, false));
  return reader.Describe();
}

std::vector<float> Generator::NextLogits(std::span<const int32_t> tokens) {
  MOTLEY_CHECK(!tokens.empty(), "NextLogits needs at least one token");
  const size_t used = std::min(tokens.size(), static_cast<size_t>(context_));
  std::vector<int32_t> window(static_cast<size_t>(context_), 0);  // padding after the text
  std::copy(tokens.end() - static_cast<std::ptrdiff_t>(used), tokens.end(), window.begin());
  backend_.CopyFromHost(tokens_, window.data(), window.size() * sizeof(int32_t));
  const tensor::Tensor hidden = body_->Forward(0, tokens_);  // (1, T, C)
  const tensor::Tensor rows = hidden.Reshaped(Shape{context_, model_.hidden});
  backend_.RmsNormForward(ln_, rstd_, rows, head_.Find("model.norm.weight")->value,
                          model_.norm_eps);
  backend_.MatmulForward(logits_, ln_, head_.Find("lm_head.weight")->value);
  body_->Discard(0);
  std::vector<float> all(static_cast<size_t>(logits_.numel()));
  backend_.CopyToHost(all.data(), logits_, logits_.bytes());
  const auto v = static_cast<size_t>(model_.vocab_size);
  const auto begin = all.begin() + static_cast<std::ptrdiff_t>((used - 1) * v);
  return {begin, begin + static_cast<std::ptrdiff_t>(v)};
}

int32_t SampleToken(std::span<const float> logits, int64_t limit, float temperature, double uniform,
                    int64_t top_k) {
  const auto n = std::min(static_cast<size_t>(limit), logits.size());
  MOTLEY_CHECK(n > 0, "SampleToken: no candidates");
  if (temperature <= 0.0F) {
    return static_cast<int32_t>(
        std::max_element(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(n)) -
        logits.begin());
  }
  const double max =
      *std::max_element(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(n));
  float floor = -std::numeric_limits<float>::infinity();  // top-k: the k-th largest logit
  if (top_k > 0 && static_cast<size_t>(top_k) < n) {
    std::vector<float> sorted(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(n));
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                     std::greater<float>());
    floor = sorted[static_cast<size_t>(top_k - 1)];
  }
  std::vector<double> p(n);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    p[i] =
        logits[i] < floor
            ? 0.0
            : std::exp((static_cast<double>(logits[i]) - max) / static_cast<double>(temperature));
    total += p[i];
  }
  double target = uniform * total;
  for (size_t i = 0; i < n; ++i) {
    if (target < p[i]) return static_cast<int32_t>(i);
    target -= p[i];
  }
  return static_cast<int32_t>(n - 1);  // rounding at the top end
}

Result<std::string> Generator::Generate(const GenerateOptions& options) {
  if (options.prompt.empty()) {
    return Err(StatusCode::kInvalidArgument, "generate: prompt: must not be empty");
  }
  if (options.max_new_tokens < 0) {
    return Err(StatusCode::kInvalidArgument, "generate: max_new_tokens: must be >= 0");
  }
  std::vector<int32_t> ids = ByteTokenizer::Encode(options.prompt);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= model_.vocab_size) {
      return Err(StatusCode::kInvalidArgument,
                 "generate: prompt: byte {} at position {} is outside the model's vocabulary of {}",
                 ids[i], i, model_.vocab_size);
    }
  }
  const int64_t limit = std::min<int64_t>(model_.vocab_size, ByteTokenizer::kVocabSize);
  std::mt19937_64 rng(options.seed);
  for (int64_t k = 0; k < options.max_new_tokens; ++k) {
    const std::vector<float> logits = NextLogits(ids);
    const double uniform = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    ids.push_back(SampleToken(logits, limit, options.temperature, uniform, options.top_k));
  }
  return ByteTokenizer::Decode(ids);
}

Result<std::string> GenerateFromCheckpoint(const spec::ModelSpec& model,
                                           const std::string& checkpoint,
                                           const GenerateOptions& options, int threads,
                                           std::string* loaded) {
  backend::CpuBackend backend(std::max(1, threads));
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Generator> gen,
                          Generator::Create(backend, model, options.context));
  Result<std::string> what = gen->LoadCheckpoint(checkpoint);
  if (!what.ok()) return what.status().WithContext("generate");
  if (loaded != nullptr) *loaded = *what;
  return gen->Generate(options);
}

}  // namespace motley::train
