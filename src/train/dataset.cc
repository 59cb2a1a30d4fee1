// See dataset.h.
#include "train/dataset.h"

#include <cmath>
#include <utility>

#include "core/install_paths.h"
#include "train/token_file.h"

namespace motley::train {
namespace {

Status CheckSplitSize(int64_t tokens, int64_t seq_len, const std::string& what) {
  if (tokens < seq_len + 1) {
    return Err(StatusCode::kInvalidArgument,
               "{}: {} tokens, fewer than one sample needs (train.seq_len + 1 = {})", what, tokens,
               seq_len + 1);
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> FindShippedCorpus() {
  return FindDataFile(kShippedCorpus);
}

std::string ShippedCorpusPath() {
  Result<std::string> path = FindShippedCorpus();
  return path.ok() ? *path : std::string(kShippedCorpus);
}

Result<TokenSplits> SplitTokens(const TokenSequence& tokens, double val_fraction, int64_t seq_len,
                                const std::string& source) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0)) {
    return Err(StatusCode::kInvalidArgument,
               "train.data.val_fraction: must be in (0, 1) when train.data.val_path is empty, "
               "got {}",
               val_fraction);
  }
  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_val = static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
  const int64_t n_train = n - n_val;
  TokenSplits splits;
  splits.train_source = fmt::format("{}[0:{})", source, n_train);
  splits.val_source = fmt::format("{}[{}:{})", source, n_train, n);
  MOTLEY_RETURN_IF_ERROR(CheckSplitSize(n_train, seq_len, "training split " + splits.train_source));
  MOTLEY_RETURN_IF_ERROR(
      CheckSplitSize(n_val, seq_len,
                     fmt::format("validation split {} (train.data.val_fraction = {})",
                                 splits.val_source, val_fraction)));
  splits.val = tokens.Slice(static_cast<size_t>(n_train), static_cast<size_t>(n));
  splits.train = tokens.Slice(0, static_cast<size_t>(n_train));
  return splits;
}

Result<TokenSplits> LoadTokenSplits(const spec::DataSpec& data, int64_t vocab_size,
                                    int64_t seq_len) {
  auto format = ParseTokenFormat(data.format);
  if (!format.ok()) return format.status().WithContext("train.data.format");
  std::string train_path = data.train_path;
  if (train_path.empty()) {
    Result<std::string> shipped = FindShippedCorpus();
    if (!shipped.ok()) {
      return shipped.status().WithContext("train.data.train_path is empty (the shipped corpus)");
    }
    train_path = *shipped;
  }
  MOTLEY_ASSIGN_OR_RETURN(TokenSequence train_tokens,
                          OpenTokenFile(train_path, *format, vocab_size));
  if (data.val_path.empty()) {
    return SplitTokens(train_tokens, data.val_fraction, seq_len, train_path);
  }
  MOTLEY_ASSIGN_OR_RETURN(TokenSequence val_tokens,
                          OpenTokenFile(data.val_path, *format, vocab_size));
  MOTLEY_RETURN_IF_ERROR(CheckSplitSize(static_cast<int64_t>(train_tokens.size()), seq_len,
                                        "training file " + train_path));
  MOTLEY_RETURN_IF_ERROR(CheckSplitSize(static_cast<int64_t>(val_tokens.size()), seq_len,
                                        "validation file " + data.val_path));
  TokenSplits splits;
  splits.train = std::move(train_tokens);
  splits.val = std::move(val_tokens);
  splits.train_source = train_path;
  splits.val_source = data.val_path;
  return splits;
}

}  // namespace motley::train
