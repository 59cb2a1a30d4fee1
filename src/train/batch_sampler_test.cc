// Tests for seeded global-batch sampling: determinism, independence from how the batch is split
// into micro-batches, bounds, and the fixed validation batches.
#include "train/batch_sampler.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace motley::train {
namespace {

TEST(BatchSamplerTest, SameSeedAndStepGiveSameOffsets) {
  const auto a = TrainBatchOffsets(1234, 7, 16, 64, 100000);
  const auto b = TrainBatchOffsets(1234, 7, 16, 64, 100000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, TrainBatchOffsets(1234, 8, 16, 64, 100000));  // another step
  EXPECT_NE(a, TrainBatchOffsets(1235, 7, 16, 64, 100000));  // another seed
  // Known values pin the hash so that a change to it cannot pass unnoticed (it would change every
  // run's data order): recomputed here from the SplitMix64 definition.
  auto mix = [](uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
  };
  const uint64_t h = mix(mix(mix(1234) ^ 7U) ^ 3U);
  EXPECT_EQ(a[3], static_cast<int64_t>(h % (100000 - 64)));
}

TEST(BatchSamplerTest, SampleDependsOnlyOnSeedStepAndIndex) {
  // A larger global batch is the smaller one plus more samples: sample i is the same whatever B is.
  const auto small = TrainBatchOffsets(9, 3, 4, 32, 5000);
  const auto large = TrainBatchOffsets(9, 3, 12, 32, 5000);
  for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(small[i], large[i]);
  EXPECT_EQ(TrainSampleOffset(9, 3, 10, 32, 5000), large[10]);
}

TEST(BatchSamplerTest, SplittingIntoMicroBatchesGivesTheSameSamples) {
  std::vector<int32_t> tokens(3000);
  std::iota(tokens.begin(), tokens.end(), 0);
  const int64_t B = 10;
  const int64_t T = 16;
  const auto offsets = TrainBatchOffsets(42, 5, B, T, static_cast<int64_t>(tokens.size()));
  std::vector<int32_t> all_in(B * T);
  std::vector<int32_t> all_tg(B * T);
  GatherSamples(tokens, offsets, T, all_in, all_tg);
  for (int64_t m : {1, 2, 3, 4, 7, 10}) {
    const auto ranges = SplitBatch(B, m);
    ASSERT_EQ(static_cast<int64_t>(ranges.size()), m);
    std::vector<int32_t> cat_in;
    std::vector<int32_t> cat_tg;
    int64_t next = 0;
    for (const SampleRange& r : ranges) {
      EXPECT_EQ(r.begin, next);
      next += r.count;
      std::vector<int32_t> in(r.count * T);
      std::vector<int32_t> tg(r.count * T);
      GatherSamples(tokens, std::span<const int64_t>(offsets).subspan(r.begin, r.count), T, in, tg);
      cat_in.insert(cat_in.end(), in.begin(), in.end());
      cat_tg.insert(cat_tg.end(), tg.begin(), tg.end());
    }
    EXPECT_EQ(next, B);
    EXPECT_EQ(cat_in, all_in) << "m = " << m;
    EXPECT_EQ(cat_tg, all_tg) << "m = " << m;
  }
}

TEST(BatchSamplerTest, SplitBatchSizesDifferByAtMostOne) {
  const auto r = SplitBatch(10, 4);
  EXPECT_EQ(r[0].count, 3);
  EXPECT_EQ(r[1].count, 3);
  EXPECT_EQ(r[2].count, 2);
  EXPECT_EQ(r[3].count, 2);
  EXPECT_EQ(r[3].begin, 8);
}

TEST(BatchSamplerTest, TargetsAreInputsShiftedByOne) {
  std::vector<int32_t> tokens(100);
  std::iota(tokens.begin(), tokens.end(), 1000);
  const std::vector<int64_t> offsets = {0, 83};  // 83 + 16 = 99: the last token is a target
  std::vector<int32_t> in(2 * 16);
  std::vector<int32_t> tg(2 * 16);
  GatherSamples(tokens, offsets, 16, in, tg);
  EXPECT_EQ(in[0], 1000);
  EXPECT_EQ(tg[0], 1001);
  EXPECT_EQ(in[16], 1083);
  EXPECT_EQ(tg[31], 1099);
}

TEST(BatchSamplerTest, OffsetsStayInBoundsAndCoverTheRange) {
  // The smallest split that fits a sample: the only start is 0.
  for (int64_t step = 0; step < 50; ++step) {
    for (int64_t off : TrainBatchOffsets(1, step, 8, 64, 65)) EXPECT_EQ(off, 0);
  }
  // 10 possible starts: all are hit, none is outside, and counts are near uniform.
  std::vector<int> hits(10, 0);
  for (int64_t step = 0; step < 1000; ++step) {
    for (int64_t off : TrainBatchOffsets(77, step, 10, 20, 30)) {
      ASSERT_GE(off, 0);
      ASSERT_LE(off, 9);
      ++hits[static_cast<size_t>(off)];
    }
  }
  for (int h : hits) {
    EXPECT_GT(h, 850);  // expected 1000 each; 850 is about 5 standard deviations below
    EXPECT_LT(h, 1150);
  }
}

TEST(BatchSamplerTest, SamplesOfAStepAreMostlyDistinct) {
  const auto offsets = TrainBatchOffsets(5, 0, 64, 128, 1900000);
  const std::set<int64_t> unique(offsets.begin(), offsets.end());
  EXPECT_GE(unique.size(), 63U);
}

TEST(BatchSamplerTest, ValidationBatchesAreFixedAndSpanTheSplit) {
  const int64_t n = 10000;
  const int64_t T = 64;
  const int64_t batches = 4;
  const int64_t B = 8;
  std::vector<int64_t> all;
  for (int64_t b = 0; b < batches; ++b) {
    const auto offsets = ValidationBatchOffsets(b, batches, B, T, n);
    EXPECT_EQ(offsets, ValidationBatchOffsets(b, batches, B, T, n));
    all.insert(all.end(), offsets.begin(), offsets.end());
  }
  EXPECT_EQ(all.front(), 0);
  EXPECT_EQ(all.back(), n - T - 1);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_GT(all[i], all[i - 1]);
  EXPECT_EQ(ValidationBatchOffsets(0, 1, 1, T, n), std::vector<int64_t>{0});
}

}  // namespace
}  // namespace motley::train
