// See batch_sampler.h.
#include "train/batch_sampler.h"

#include <algorithm>

#include "core/check.h"

namespace motley::train {
namespace {

// SplitMix64's finalizer (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014): a bijective 64-bit mix, specified bit for bit, so offsets are the same
// on every platform and compiler (unlike std:: distributions).
uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

int64_t TrainSampleOffset(uint64_t seed, int64_t step, int64_t index, int64_t seq_len,
                          int64_t num_tokens) {
  MOTLEY_CHECK(seq_len > 0 && num_tokens >= seq_len + 1, "split too short for one sample");
  MOTLEY_CHECK(step >= 0 && index >= 0, "negative step or sample index");
  const uint64_t h =
      Mix64(Mix64(Mix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(index));
  // Starts 0..num_tokens-seq_len-1. The modulo bias is below range / 2^64 (< 1e-10 for any
  // corpus under 1.8 TB of tokens), far below sampling noise.
  const auto range = static_cast<uint64_t>(num_tokens - seq_len);
  return static_cast<int64_t>(h % range);
}

std::vector<int64_t> TrainBatchOffsets(uint64_t seed, int64_t step, int64_t global_batch,
                                       int64_t seq_len, int64_t num_tokens) {
  MOTLEY_CHECK(global_batch > 0, "global batch must be positive");
  std::vector<int64_t> offsets(static_cast<size_t>(global_batch));
  for (int64_t i = 0; i < global_batch; ++i) {
    offsets[static_cast<size_t>(i)] = TrainSampleOffset(seed, step, i, seq_len, num_tokens);
  }
  return offsets;
}

std::vector<int64_t> ValidationBatchOffsets(int64_t batch, int64_t num_batches,
                                            int64_t global_batch, int64_t seq_len,
                                            int64_t num_tokens) {
  MOTLEY_CHECK(num_batches > 0 && batch >= 0 && batch < num_batches, "bad validation batch");
  MOTLEY_CHECK(global_batch > 0, "global batch must be positive");
  MOTLEY_CHECK(seq_len > 0 && num_tokens >= seq_len + 1, "split too short for one sample");
  const int64_t last_start = num_tokens - seq_len - 1;
  const int64_t samples = num_batches * global_batch;
  std::vector<int64_t> offsets(static_cast<size_t>(global_batch));
  for (int64_t i = 0; i < global_batch; ++i) {
    const int64_t j = batch * global_batch + i;  // sample number within the pass
    // j * last_start / (samples - 1); long double (64-bit mantissa on x86) keeps the product
    // exact where int64 could overflow.
    offsets[static_cast<size_t>(i)] =
        samples == 1 ? 0
                     : static_cast<int64_t>(static_cast<long double>(j) *
                                            static_cast<long double>(last_start) /
                                            static_cast<long double>(samples - 1));
  }
  return offsets;
}

std::vector<SampleRange> SplitBatch(int64_t global_batch, int64_t num_micro_batches) {
  MOTLEY_CHECK(num_micro_batches >= 1 && num_micro_batches <= global_batch,
               "need 1 <= micro-batches <= global batch");
  std::vector<SampleRange> ranges(static_cast<size_t>(num_micro_batches));
  const int64_t base = global_batch / num_micro_batches;
  const int64_t extra = global_batch % num_micro_batches;
  int64_t begin = 0;
  for (int64_t m = 0; m < num_micro_batches; ++m) {
    const int64_t count = base + (m < extra ? 1 : 0);
    ranges[static_cast<size_t>(m)] = {begin, count};
    begin += count;
  }
  return ranges;
}

void GatherSamples(std::span<const int32_t> tokens, std::span<const int64_t> offsets,
                   int64_t seq_len, std::span<int32_t> inputs, std::span<int32_t> targets) {
  const auto t = static_cast<size_t>(seq_len);
  MOTLEY_CHECK(inputs.size() == offsets.size() * t && targets.size() == offsets.size() * t,
               "inputs and targets must be (B, T)");
  for (size_t b = 0; b < offsets.size(); ++b) {
    MOTLEY_CHECK(offsets[b] >= 0 && static_cast<size_t>(offsets[b]) + t < tokens.size(),
                 "sample offset out of range");
    const int32_t* src = tokens.data() + offsets[b];
    std::copy(src, src + t, inputs.begin() + static_cast<std::ptrdiff_t>(b * t));
    std::copy(src + 1, src + t + 1, targets.begin() + static_cast<std::ptrdiff_t>(b * t));
  }
}

void GatherSamples(const TokenSequence& tokens, std::span<const int64_t> offsets, int64_t seq_len,
                   std::span<int32_t> inputs, std::span<int32_t> targets) {
  const auto t = static_cast<size_t>(seq_len);
  MOTLEY_CHECK(inputs.size() == offsets.size() * t && targets.size() == offsets.size() * t,
               "inputs and targets must be (B, T)");
  for (size_t b = 0; b < offsets.size(); ++b) {
    MOTLEY_CHECK(offsets[b] >= 0 && static_cast<size_t>(offsets[b]) + t < tokens.size(),
                 "sample offset out of range");
    const auto o = static_cast<size_t>(offsets[b]);
    tokens.CopyTo(o, inputs.subspan(b * t, t));
    tokens.CopyTo(o + 1, targets.subspan(b * t, t));
  }
}

}  // namespace motley::train
