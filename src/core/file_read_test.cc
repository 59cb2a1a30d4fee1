// The read side of core/file_util.h and core/mapped_file.h: special files are refused before any
// read (a FIFO without a writer must not block), size limits, error codes from errno, mappings.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/file_util.h"
#include "core/mapped_file.h"

namespace motley {
namespace {

class FileReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("motley_file_read_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(FileReadTest, ReadsRegularFiles) {
  ASSERT_TRUE(WriteFileAtomic(Path("a.txt"), "hello\n").ok());
  Result<std::string> text = ReadFile(Path("a.txt"));
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, "hello\n");
  ASSERT_TRUE(WriteFileAtomic(Path("empty"), "").ok());
  EXPECT_EQ(ReadFile(Path("empty")).value(), "");
}

TEST_F(FileReadTest, MissingFileIsNotFound) {
  Result<std::string> text = ReadFile(Path("nope.yaml"));
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kNotFound);
  EXPECT_NE(text.status().message().find("nope.yaml: cannot open"), std::string::npos);
  EXPECT_EQ(ExitCodeFor(text.status()), 2);
}

TEST_F(FileReadTest, FifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(Path("pipe").c_str(), 0600), 0);
  Result<std::string> text = ReadFile(Path("pipe"));  // no writer: a plain open would block
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find("is a FIFO (named pipe), not a regular file"),
            std::string::npos)
      << text.status().message();
  EXPECT_FALSE(MappedFile::Open(Path("pipe"), "token file").ok());
}

TEST_F(FileReadTest, DevicesAndDirectoriesAreRefused) {
  Result<std::string> zero = ReadFile("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("/dev/zero: is a character device"), std::string::npos)
      << zero.status().message();
  Result<std::string> dir = ReadFile(dir_.string());
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos);
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  Result<MappedFile> mapped = MappedFile::Open("/dev/zero", "token file");
  ASSERT_FALSE(mapped.ok());
  EXPECT_NE(mapped.status().message().find("(expected a token file)"), std::string::npos)
      << mapped.status().message();
}

TEST_F(FileReadTest, SizeLimitIsCheckedBeforeReading) {
  ASSERT_TRUE(WriteFileAtomic(Path("big"), std::string(2048, 'x')).ok());
  EXPECT_TRUE(ReadFile(Path("big"), 2048).ok());
  Result<std::string> text = ReadFile(Path("big"), 2047);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find("2048 bytes, larger than"), std::string::npos)
      << text.status().message();
}

TEST_F(FileReadTest, UnreadableFileIsAnInputError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  ASSERT_TRUE(WriteFileAtomic(Path("secret"), "x").ok());
  ASSERT_EQ(::chmod(Path("secret").c_str(), 0), 0);
  Result<std::string> text = ReadFile(Path("secret"));
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FileReadTest, MapsWholeFiles) {
  ASSERT_TRUE(WriteFileAtomic(Path("m.bin"), std::string("\x01\x02\x03", 3)).ok());
  Result<MappedFile> file = MappedFile::Open(Path("m.bin"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->size(), 3U);
  EXPECT_EQ(file->bytes()[2], 3);
  MappedFile moved = std::move(*file);
  EXPECT_EQ(moved.size(), 3U);
  EXPECT_EQ(moved.bytes()[0], 1);
  ASSERT_TRUE(WriteFileAtomic(Path("empty.bin"), "").ok());
  Result<MappedFile> empty = MappedFile::Open(Path("empty.bin"));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0U);
  Result<MappedFile> missing = MappedFile::Open(Path("none.bin"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(CodeForErrnoTest, MapsOsErrors) {
  EXPECT_EQ(CodeForErrno(ENOENT), StatusCode::kNotFound);
  EXPECT_EQ(CodeForErrno(EACCES), StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeForErrno(ENOMEM), StatusCode::kResourceExhausted);
  EXPECT_EQ(CodeForErrno(EIO), StatusCode::kUnavailable);
  // The write side of the same table: not writable is a precondition, a full disk or a file-size
  // limit a resource.
  EXPECT_EQ(CodeForErrno(ENOENT, FileAccess::kWrite), StatusCode::kNotFound);
  EXPECT_EQ(CodeForErrno(EACCES, FileAccess::kWrite), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CodeForErrno(EROFS, FileAccess::kWrite), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CodeForErrno(ENOSPC, FileAccess::kWrite), StatusCode::kResourceExhausted);
  EXPECT_EQ(CodeForErrno(EFBIG, FileAccess::kWrite), StatusCode::kResourceExhausted);
  EXPECT_EQ(CodeForErrno(EIO, FileAccess::kWrite), StatusCode::kUnknown);
}

}  // namespace
}  // namespace motley
