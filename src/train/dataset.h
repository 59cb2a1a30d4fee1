// The token data of a run: the training and validation splits, views of the memory-mapped files a
// DataSpec names (or of the shipped corpus, data/corpus/kjv.txt), read as int32 ids on access.
//
// Split rule (documented in data/corpus/README.md and docs/formats/token-files.md): without a
// val_path, the LAST floor(n * val_fraction) tokens of the training file are the validation split
// and the rest is the training split; with a val_path, the two files are used whole.
// Plain value type; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "spec/train_spec.h"
#include "train/token_file.h"

namespace motley::train {

struct TokenSplits {
  TokenSequence train;
  TokenSequence val;
  std::string train_source;  // "path" or "path[0:n)" for display
  std::string val_source;
};

// The shipped corpus, relative to the data folder (core/install_paths.h): found beside the
// executable in the build tree and in an install alike.
inline constexpr const char* kShippedCorpus = "data/corpus/kjv.txt";
// Its path, or an error naming where it was looked for.
Result<std::string> FindShippedCorpus();
// Its path, or kShippedCorpus itself when it is not found (the read then fails naming it).
std::string ShippedCorpusPath();

// Loads and splits. Errors name the file (missing, bad size, id >= vocab_size) or the field
// (train.data.format, train.data.val_fraction) and the reason; each split must hold at least
// seq_len + 1 tokens (one sample).
Result<TokenSplits> LoadTokenSplits(const spec::DataSpec& data, int64_t vocab_size,
                                    int64_t seq_len);

// Splits `tokens` by the rule above; the split sizes are checked as in LoadTokenSplits.
Result<TokenSplits> SplitTokens(const TokenSequence& tokens, double val_fraction, int64_t seq_len,
                                const std::string& source);

}  // namespace motley::train
