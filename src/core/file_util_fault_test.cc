// Write faults of core/file_util.h (CTest label `fault`): a write past the file-size limit
// (RLIMIT_FSIZE, set in a child process with SIGXFSZ ignored, so the write fails with EFBIG) is
// kResourceExhausted and leaves the old file and no temporary file behind.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/file_util.h"

namespace motley {
namespace {

namespace fs = std::filesystem;

TEST(FileWriteFault, AFileSizeLimitIsResourceExhaustedAndLeavesNothing) {
  const fs::path dir =
      fs::temp_directory_path() / ("motley-file-fault-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string out = (dir / "out").string();
  std::ofstream(out) << "old";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(3);
    const Status s = WriteFileAtomic(out, std::string(100000, 'x'));
    ::_exit(!s.ok() && s.code() == StatusCode::kResourceExhausted ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the write past the limit was not kResourceExhausted";
  EXPECT_EQ(ReadFile(out).value(), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), {}), 1);  // no temporary file
  fs::remove_all(dir);
}

}  // namespace
}  // namespace motley
