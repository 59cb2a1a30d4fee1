// Tests for token files: u16/u32/text reading, the little-endian layout, and errors naming the
// file.
#include "train/token_file.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "core/file_util.h"

namespace motley::train {
namespace {

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("motley_token_file_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(TokenFileTest, ReadsLittleEndianU16) {
  // 0x0102 = 258 and 0x00FF = 255, little-endian.
  ASSERT_TRUE(WriteFileAtomic(Path("a.bin"), std::string("\x02\x01\xff\x00", 4)).ok());
  auto ids = ReadTokenFile(Path("a.bin"), TokenFormat::kU16, 50304);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(*ids, (std::vector<int32_t>{258, 255}));
}

TEST_F(TokenFileTest, WriteThenReadRoundTripsU16AndU32) {
  const std::vector<int32_t> ids = {0, 1, 65535, 300, 7};
  ASSERT_TRUE(WriteTokenFile(Path("a.u16"), TokenFormat::kU16, ids).ok());
  auto r16 = ReadTokenFile(Path("a.u16"), TokenFormat::kU16, 65536);
  ASSERT_TRUE(r16.ok()) << r16.status().message();
  EXPECT_EQ(*r16, ids);
  EXPECT_EQ(std::filesystem::file_size(Path("a.u16")), 10U);

  const std::vector<int32_t> big = {0, 100000, 70000, 3};
  ASSERT_TRUE(WriteTokenFile(Path("a.u32"), TokenFormat::kU32, big).ok());
  auto r32 = ReadTokenFile(Path("a.u32"), TokenFormat::kU32, 128000);
  ASSERT_TRUE(r32.ok()) << r32.status().message();
  EXPECT_EQ(*r32, big);
  EXPECT_EQ(std::filesystem::file_size(Path("a.u32")), 16U);
  EXPECT_FALSE(WriteTokenFile(Path("x.u16"), TokenFormat::kU16, {70000}).ok());
}

TEST_F(TokenFileTest, ReadsTextAsBytes) {
  ASSERT_TRUE(WriteFileAtomic(Path("t.txt"), "ab\n").ok());
  auto ids = ReadTokenFile(Path("t.txt"), TokenFormat::kText, 256);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{97, 98, 10}));
}

TEST_F(TokenFileTest, LargeFileCrossesChunkBoundaries) {
  std::vector<int32_t> ids(700000);  // 1.4 MB as u16: more than one 1 MiB read chunk
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % 50000);
  ASSERT_TRUE(WriteTokenFile(Path("big.bin"), TokenFormat::kU16, ids).ok());
  auto back = ReadTokenFile(Path("big.bin"), TokenFormat::kU16, 50000);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, ids);
}

TEST_F(TokenFileTest, MissingFileNamesThePath) {
  auto ids = ReadTokenFile(Path("nope.bin"), TokenFormat::kU16, 256);
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find(Path("nope.bin")), std::string::npos);
  EXPECT_NE(ids.status().message().find("cannot open"), std::string::npos);
}

TEST_F(TokenFileTest, OddSizeIsRejected) {
  ASSERT_TRUE(WriteFileAtomic(Path("odd.bin"), std::string("\x01\x00\x02", 3)).ok());
  auto ids = ReadTokenFile(Path("odd.bin"), TokenFormat::kU16, 256);
  ASSERT_FALSE(ids.ok());
  const std::string& msg = ids.status().message();
  EXPECT_NE(msg.find(Path("odd.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a multiple of 2"), std::string::npos) << msg;
  ASSERT_TRUE(WriteFileAtomic(Path("odd32.bin"), std::string("\x01\x00\x02\x00\x00\x00", 6)).ok());
  EXPECT_FALSE(ReadTokenFile(Path("odd32.bin"), TokenFormat::kU32, 256).ok());
}

TEST_F(TokenFileTest, IdAboveVocabularyIsRejectedWithItsPosition) {
  ASSERT_TRUE(WriteTokenFile(Path("v.bin"), TokenFormat::kU16, {1, 2, 300, 4}).ok());
  auto ids = ReadTokenFile(Path("v.bin"), TokenFormat::kU16, 256);
  ASSERT_FALSE(ids.ok());
  const std::string& msg = ids.status().message();
  EXPECT_NE(msg.find(Path("v.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 2 has id 300"), std::string::npos) << msg;
  // Text bytes above a small vocabulary are rejected the same way.
  ASSERT_TRUE(WriteFileAtomic(Path("t.txt"), "AB").ok());
  EXPECT_FALSE(ReadTokenFile(Path("t.txt"), TokenFormat::kText, 66).ok());
  EXPECT_TRUE(ReadTokenFile(Path("t.txt"), TokenFormat::kText, 67).ok());
}

TEST_F(TokenFileTest, EmptyFileAndDirectoryAreRejected) {
  ASSERT_TRUE(WriteFileAtomic(Path("empty.bin"), "").ok());
  EXPECT_FALSE(ReadTokenFile(Path("empty.bin"), TokenFormat::kU16, 256).ok());
  auto dir = ReadTokenFile(dir_.string(), TokenFormat::kU16, 256);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find(dir_.string()), std::string::npos);
}

TEST(TokenFormatTest, ParsesKnownNamesOnly) {
  EXPECT_EQ(*ParseTokenFormat("u16"), TokenFormat::kU16);
  EXPECT_EQ(*ParseTokenFormat("u32"), TokenFormat::kU32);
  EXPECT_EQ(*ParseTokenFormat("text"), TokenFormat::kText);
  auto bad = ParseTokenFormat("u8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'u8'"), std::string::npos);
}

}  // namespace
}  // namespace motley::train
