// Fuzz target: token files (docs/formats/token-files.md). The first byte picks the format (text,
// u16, u32) and the sequence length, the next four the vocabulary size; the rest is the file,
// mapped as `motley train` maps it, then split and sampled as training does.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "train/batch_sampler.h"
#include "train/dataset.h"
#include "train/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace motley;
  if (size < 5) return 0;
  const train::TokenFormat format = static_cast<train::TokenFormat>(data[0] % 3);
  const int64_t seq_len = 1 + (data[0] >> 2) % 16;
  uint32_t raw_vocab = 0;
  std::memcpy(&raw_vocab, data + 1, sizeof raw_vocab);
  const int64_t vocab = 1 + static_cast<int64_t>(raw_vocab % (uint32_t{1} << 31));
  const std::string path = fuzz::WriteScratch("tokens.bin", fuzz::AsText(data + 5, size - 5));
  Result<train::TokenSequence> tokens = train::OpenTokenFile(path, format, vocab);
  if (!tokens.ok()) return 0;
  Result<train::TokenSplits> splits = train::SplitTokens(*tokens, 0.25, seq_len, path);
  if (!splits.ok()) return 0;
  const auto n = static_cast<int64_t>(splits->train.size());
  const std::vector<int64_t> offsets = train::TrainBatchOffsets(7, 3, 4, seq_len, n);
  std::vector<int32_t> inputs(static_cast<size_t>(4 * seq_len));
  std::vector<int32_t> targets(inputs.size());
  train::GatherSamples(splits->train, offsets, seq_len, inputs, targets);
  return 0;
}
