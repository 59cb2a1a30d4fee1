// The write side of core/file_util.h: outputs replace only absent or regular files; symbolic
// links, FIFOs, device nodes (made with mknod inside a temporary folder) and directories are
// refused and left untouched. (Write faults: file_util_fault_test.cc.)
#include "core/file_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace motley {
namespace {

namespace fs = std::filesystem;

class FileWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("motley-file-util-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Slurp(const std::string& path) {
    Result<std::string> text = ReadFile(path);
    return text.ok() ? *text : "<unreadable>";
  }
  static void Put(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  // Names in the folder, to see that no temporary file stayed behind.
  size_t Entries() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {}));
  }
  // A refused output: kInvalidArgument naming the path and what is there.
  static void ExpectRefused(const Status& s, const std::string& path, const char* kind) {
    ASSERT_FALSE(s.ok()) << path;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(kind), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.message();
  }
  fs::path dir_;
};

TEST_F(FileWriteTest, ReplacesRegularFilesAndCreatesAbsentOnes) {
  ASSERT_TRUE(WriteFileAtomic(Path("a"), "one").ok());
  EXPECT_EQ(Slurp(Path("a")), "one");
  ASSERT_TRUE(WriteFileAtomic(Path("a"), "two").ok());
  EXPECT_EQ(Slurp(Path("a")), "two");
  EXPECT_EQ(Entries(), 1U);  // no temporary file left
  EXPECT_EQ(fs::status(Path("a")).permissions() & fs::perms::owner_read, fs::perms::owner_read);

  Result<std::FILE*> f = OpenOutputFile(Path("b"), /*append=*/false);
  ASSERT_TRUE(f.ok()) << f.status().message();
  std::fputs("x\n", *f);
  std::fclose(*f);
  f = OpenOutputFile(Path("b"), /*append=*/true);
  ASSERT_TRUE(f.ok());
  std::fputs("y\n", *f);
  std::fclose(*f);
  EXPECT_EQ(Slurp(Path("b")), "x\ny\n");
  f = OpenOutputFile(Path("b"), /*append=*/false);
  ASSERT_TRUE(f.ok());
  std::fclose(*f);
  EXPECT_EQ(Slurp(Path("b")), "");  // truncated

  const Status missing = WriteFileAtomic(Path("no/such/folder/x"), "z");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.message();
}

TEST_F(FileWriteTest, ASymlinkTargetIsLeftUntouched) {
  Put(Path("victim"), "precious");
  fs::create_symlink(Path("victim"), Path("link"));
  ExpectRefused(WriteFileAtomic(Path("link"), "overwritten"), Path("link"), "a symbolic link");
  Result<std::FILE*> f = OpenOutputFile(Path("link"), false);
  ASSERT_FALSE(f.ok());
  ExpectRefused(f.status(), Path("link"), "a symbolic link");
  EXPECT_TRUE(fs::is_symlink(Path("link")));
  EXPECT_EQ(Slurp(Path("victim")), "precious");
  // A dangling link too (writing would create its target).
  fs::create_symlink(Path("elsewhere"), Path("dangling"));
  ExpectRefused(WriteFileAtomic(Path("dangling"), "x"), Path("dangling"), "a symbolic link");
  EXPECT_FALSE(fs::exists(Path("elsewhere")));
  EXPECT_EQ(Entries(), 3U);
}

// The old implementation wrote PATH.tmp with O_TRUNC: a link planted there redirected the write.
TEST_F(FileWriteTest, ALinkPlantedAtTheOldTemporaryNameIsNotFollowed) {
  Put(Path("victim"), "precious");
  fs::create_symlink(Path("victim"), Path("out.tmp"));
  ASSERT_TRUE(WriteFileAtomic(Path("out"), "result").ok());
  EXPECT_EQ(Slurp(Path("out")), "result");
  EXPECT_EQ(Slurp(Path("victim")), "precious");
}

TEST_F(FileWriteTest, AFifoIsRefusedWithoutWaitingForAReader) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0644), 0) << std::strerror(errno);
  ExpectRefused(WriteFileAtomic(Path("fifo"), "x"), Path("fifo"), "a FIFO");
  Result<std::FILE*> f = OpenOutputFile(Path("fifo"), true);
  ASSERT_FALSE(f.ok());
  ExpectRefused(f.status(), Path("fifo"), "a FIFO");
  EXPECT_TRUE(fs::is_fifo(Path("fifo")));
}

// A device node made inside the temporary folder (never a path under /dev): the same numbers as
// /dev/null.
TEST_F(FileWriteTest, ADeviceNodeIsRefusedAndKept) {
  if (::mknod(Path("dev").c_str(), S_IFCHR | 0644, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod needs CAP_MKNOD here: " << std::strerror(errno);
  }
  ExpectRefused(WriteFileAtomic(Path("dev"), "x"), Path("dev"), "a character device");
  Result<std::FILE*> f = OpenOutputFile(Path("dev"), false);
  ASSERT_FALSE(f.ok());
  ExpectRefused(f.status(), Path("dev"), "a character device");
  EXPECT_TRUE(fs::is_character_file(Path("dev")));
  EXPECT_EQ(Entries(), 1U);
}

TEST_F(FileWriteTest, ADirectoryIsRefused) {
  fs::create_directory(Path("d"));
  ExpectRefused(WriteFileAtomic(Path("d"), "x"), Path("d"), "a directory");
  EXPECT_TRUE(fs::is_directory(Path("d")));
}

}  // namespace
}  // namespace motley
