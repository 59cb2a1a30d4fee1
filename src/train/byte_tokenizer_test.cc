// Tests for the byte-level tokenizer: round trips, unsigned bytes, rejected ids.
#include "train/byte_tokenizer.h"

#include <gtest/gtest.h>

namespace motley::train {
namespace {

TEST(ByteTokenizerTest, EncodesBytesAsUnsignedIds) {
  const std::string text = std::string("Hi\n") + '\xff' + '\0';
  const std::vector<int32_t> ids = ByteTokenizer::Encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{72, 105, 10, 255, 0}));
}

TEST(ByteTokenizerTest, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  auto decoded = ByteTokenizer::Decode(ByteTokenizer::Encode(all));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(*decoded, all);
}

TEST(ByteTokenizerTest, RejectsIdsOutsideAByte) {
  const std::vector<int32_t> ids = {65, 256};
  auto decoded = ByteTokenizer::Decode(ids);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("id 256 at position 1"), std::string::npos)
      << decoded.status().message();
  EXPECT_FALSE(ByteTokenizer::Decode(std::vector<int32_t>{-1}).ok());
}

}  // namespace
}  // namespace motley::train
