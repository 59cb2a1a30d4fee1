// Tests for loading and splitting token data, including the shipped corpus.
#include "train/dataset.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "train/byte_tokenizer.h"
#include "train/token_file.h"

namespace motley::train {
namespace {

TEST(DatasetTest, ShippedCorpusSplitsOffTheLastFivePercent) {
  spec::DataSpec data;  // defaults: text, shipped corpus, val_fraction 0.05
  auto splits = LoadTokenSplits(data, 256, 128);
  ASSERT_TRUE(splits.ok()) << splits.status().message();
  const size_t n = splits->train.size() + splits->val.size();
  EXPECT_GT(n, 1000000U);
  EXPECT_LE(n, 2000000U);  // the corpus is at most 2 MB
  EXPECT_EQ(splits->val.size(), static_cast<size_t>(static_cast<double>(n) * 0.05));
  // The corpus starts with Genesis; the validation split is its tail (the end of Job).
  auto head = ByteTokenizer::Decode(splits->train.ToVector(0, 7));
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(*head, "Genesis");
  auto tail = ByteTokenizer::Decode(splits->val.ToVector(splits->val.size() - 18, 18));
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(*tail, "and full of days.\n");
}

TEST(DatasetTest, SplitTokensIsExactAndChecksSizes) {
  std::vector<int32_t> tokens(100);
  for (int i = 0; i < 100; ++i) tokens[static_cast<size_t>(i)] = i;
  auto splits = SplitTokens(TokenSequence(tokens), 0.1, 8, "x");
  ASSERT_TRUE(splits.ok());
  EXPECT_EQ(splits->train.size(), 90U);
  EXPECT_EQ(splits->val[0], 90);
  EXPECT_EQ(splits->val_source, "x[90:100)");

  auto too_short = SplitTokens(TokenSequence(tokens), 0.05, 8, "x");  // 5 validation tokens < 9
  ASSERT_FALSE(too_short.ok());
  EXPECT_NE(too_short.status().message().find("train.data.val_fraction"), std::string::npos)
      << too_short.status().message();
  auto bad_fraction = SplitTokens(TokenSequence(tokens), 1.5, 8, "x");
  ASSERT_FALSE(bad_fraction.ok());
  EXPECT_NE(bad_fraction.status().message().find("train.data.val_fraction"), std::string::npos);
}

TEST(DatasetTest, SeparateValidationFileAndErrors) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("motley_dataset_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<int32_t> train_ids(500, 7);
  std::vector<int32_t> val_ids(40, 9);
  ASSERT_TRUE(WriteTokenFile((dir / "train.bin").string(), TokenFormat::kU16, train_ids).ok());
  ASSERT_TRUE(WriteTokenFile((dir / "val.bin").string(), TokenFormat::kU16, val_ids).ok());
  spec::DataSpec data;
  data.format = "u16";
  data.train_path = (dir / "train.bin").string();
  data.val_path = (dir / "val.bin").string();
  auto splits = LoadTokenSplits(data, 50304, 32);
  ASSERT_TRUE(splits.ok()) << splits.status().message();
  EXPECT_EQ(splits->train.ToVector(0, splits->train.size()), train_ids);
  EXPECT_EQ(splits->val.ToVector(0, splits->val.size()), val_ids);

  auto too_long = LoadTokenSplits(data, 50304, 40);  // 40 validation tokens < T + 1
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("val.bin"), std::string::npos);

  data.format = "u12";
  auto bad_format = LoadTokenSplits(data, 50304, 32);
  ASSERT_FALSE(bad_format.ok());
  EXPECT_NE(bad_format.status().message().find("train.data.format"), std::string::npos);

  data.format = "u16";
  data.val_path = (dir / "missing.bin").string();
  auto missing = LoadTokenSplits(data, 50304, 32);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.bin"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace motley::train
