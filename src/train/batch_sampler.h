// Deterministic, seeded sampling of each step's global batch (docs/architecture.md §4).
//
// A sample is T+1 consecutive tokens of a split starting at an offset: inputs are tokens
// [offset, offset+T) and targets [offset+1, offset+T+1). Step k's global batch is the list of B
// offsets computed from (seed, k, sample index) alone: it does not depend on the plan, the number
// of micro-batches or pipelines, or on which rank asks. A plan only decides which pipeline and
// micro-batch each sample index goes through, so every plan trains on the same data.
// Validation batches are fixed: evenly spaced offsets over the validation split.
//
// Free functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/token_file.h"

namespace motley::train {

// Offset of sample `index` of training step `step` in a split of `num_tokens` tokens:
// uniform in [0, num_tokens - seq_len - 1] (so T+1 tokens fit), from a SplitMix64 hash of
// (seed, step, index). Requires num_tokens >= seq_len + 1.
int64_t TrainSampleOffset(uint64_t seed, int64_t step, int64_t index, int64_t seq_len,
                          int64_t num_tokens);

// The B offsets of step `step`'s global batch, sample index order.
std::vector<int64_t> TrainBatchOffsets(uint64_t seed, int64_t step, int64_t global_batch,
                                       int64_t seq_len, int64_t num_tokens);

// The B offsets of validation batch `batch` of `num_batches` (0-based): the num_batches * B
// samples of a validation pass are spread evenly from the start to the end of the split.
std::vector<int64_t> ValidationBatchOffsets(int64_t batch, int64_t num_batches,
                                            int64_t global_batch, int64_t seq_len,
                                            int64_t num_tokens);

// A contiguous range of sample indices of the global batch (one micro-batch).
struct SampleRange {
  int64_t begin = 0;
  int64_t count = 0;
};

// Splits B samples into `num_micro_batches` contiguous ranges whose sizes differ by at most one
// (the first B % m ranges get one more). Requires 1 <= num_micro_batches <= B.
std::vector<SampleRange> SplitBatch(int64_t global_batch, int64_t num_micro_batches);

// Copies the samples at `offsets` out of `tokens`: inputs and targets are (B', T) i32, row-major,
// B' = offsets.size(). Requires every offset + seq_len < tokens.size().
void GatherSamples(std::span<const int32_t> tokens, std::span<const int64_t> offsets,
                   int64_t seq_len, std::span<int32_t> inputs, std::span<int32_t> targets);
// The same from a TokenSequence (a mapped token file), converting ids to int32.
void GatherSamples(const TokenSequence& tokens, std::span<const int64_t> offsets, int64_t seq_len,
                   std::span<int32_t> inputs, std::span<int32_t> targets);

}  // namespace motley::train
