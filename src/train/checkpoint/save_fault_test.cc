// Save faults (CTest label `fault`): a save that fails at any phase, or because the disk is full
// (a file-size limit, RLIMIT_FSIZE, in a child process; and a small tmpfs mounted in a private
// mount namespace where this machine allows it), removes what it wrote, leaves `latest` on the
// last good checkpoint and that checkpoint loadable with its values.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_test_util.h"

namespace motley::train {
namespace {

namespace fs = std::filesystem;
using testing::MakeSet;
using testing::Model4;
using testing::TempDir;

CheckpointMetadata Meta(int64_t step) {
  CheckpointMetadata md;
  md.step = step;
  md.model = Model4();
  return md;
}

// Two stages with values from `seed`.
struct TwoStages {
  model::ParameterSet s0, s1;
  TwoStages(tensor::Backend& be, uint64_t seed)
      : s0(MakeSet(be, Model4(), testing::Layout(0, 2, true, false), seed)),
        s1(MakeSet(be, Model4(), testing::Layout(2, 2, false, true), seed)) {}
  std::vector<StageToSave> stages(tensor::Backend& be) { return {{&be, &s0}, {&be, &s1}}; }
};

// "" when ROOT holds exactly the complete checkpoint of step 10 with the values of `want` (plus
// `latest`) and nothing of the failed save of step 20; else what is wrong.
std::string CheckOnlyStepTen(tensor::Backend& be, const std::string& root,
                             const model::ParameterSet& want) {
  std::string names;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (n != "latest" && n != "step-00000010") names += " " + n;
  }
  if (!names.empty()) return "left behind:" + names;
  auto latest = FindLatestCheckpoint(root);
  if (!latest.ok() || *latest != root + "/step-00000010") return "latest is not step 10";
  model::ParameterSet loaded = MakeSet(be, Model4(), model::StageLayout::Full(Model4()), 1, 9.0F);
  auto reader = CheckpointReader::OpenFor(root, Model4());
  if (!reader.ok()) return reader.status().message();
  const Status s = reader->LoadIntoStage(be, loaded);
  if (!s.ok()) return s.message();
  for (const model::Parameter& p : loaded) {
    if (testing::Host(be, p.value) != testing::Host(be, want.Find(p.name())->value)) {
      return "values differ: " + p.name();
    }
  }
  return "";
}

TEST(SaveFault, AFailureAtAnyPhaseRemovesWhatTheSaveWrote) {
  backend::CpuBackend be;
  TempDir tmp;
  TwoStages good(be, 7);
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(10), good.stages(be)).ok());
  const model::ParameterSet want = MakeSet(be, Model4(), model::StageLayout::Full(Model4()), 7);
  TwoStages newer(be, 8);
  for (const char* fail_at :
       {"begin", "stage 0", "stage 1", "index", "sidecar", "fsync", "rename", "latest"}) {
    SCOPED_TRACE(fail_at);
    SaveOptions opt;
    opt.keep_last = 1;
    opt.fault_hook = [&](std::string_view phase) {
      return phase == fail_at ? Err(StatusCode::kResourceExhausted, "injected failure at {}", phase)
                              : Status::Ok();
    };
    auto r = SaveCheckpoint(tmp.path(), Meta(20), newer.stages(be), opt);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(CheckOnlyStepTen(be, tmp.path(), want), "");
  }
}

// Saving the step of an existing checkpoint again and failing after the rename puts the previous
// copy back.
TEST(SaveFault, AFailedResaveOfAStepRestoresThePreviousCopy) {
  backend::CpuBackend be;
  TempDir tmp;
  TwoStages good(be, 7);
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(10), good.stages(be)).ok());
  const model::ParameterSet want = MakeSet(be, Model4(), model::StageLayout::Full(Model4()), 7);
  TwoStages other(be, 8);
  SaveOptions opt;
  opt.fault_hook = [](std::string_view phase) {
    return phase == "latest" ? Err("injected failure") : Status::Ok();
  };
  ASSERT_FALSE(SaveCheckpoint(tmp.path(), Meta(10), other.stages(be), opt).ok());
  EXPECT_EQ(CheckOnlyStepTen(be, tmp.path(), want), "");
}

// Runs `body` in a child process and returns its exit code (-signal when killed); the child
// reports through its exit code only.
int InChild(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1000;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// A file-size limit below the size of the stage files: the save of step 20 fails while writing
// (EFBIG: SIGXFSZ is ignored, as the motley binary does), as on a full disk.
TEST(SaveFault, AFileSizeLimitDuringASaveLeavesTheLastGoodCheckpoint) {
  backend::CpuBackend be;
  TempDir tmp;
  TwoStages good(be, 7);
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(10), good.stages(be)).ok());
  const model::ParameterSet want = MakeSet(be, Model4(), model::StageLayout::Full(Model4()), 7);
  TwoStages newer(be, 8);
  const int rc = InChild([&] {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{8192, 8192};  // every stage file is larger
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 3;
    auto r = SaveCheckpoint(tmp.path(), Meta(20), newer.stages(be));
    if (r.ok()) return 1;
    return r.status().code() == StatusCode::kResourceExhausted &&
                   r.status().message().find("File too large") != std::string::npos
               ? 0
               : 2;
  });
  EXPECT_EQ(rc, 0) << "1: the save succeeded, 2: not kResourceExhausted naming the cause";
  EXPECT_EQ(CheckOnlyStepTen(be, tmp.path(), want), "");
}

// A tmpfs with room for one checkpoint (mounted in the child's own mount namespace, so nothing
// outside it sees the mount): step 10 fits, step 20 runs out of space (ENOSPC). The child checks
// what is left and reports: 0 all good, 77 no tmpfs here (skipped), other: a failure.
TEST(SaveFault, AFullTmpfsDuringASaveLeavesTheLastGoodCheckpoint) {
  backend::CpuBackend be;
  TempDir tmp;
  TwoStages good(be, 7);
  // The room one checkpoint takes: measured on an ordinary folder.
  const std::string probe = tmp.path() + "/probe";
  ASSERT_TRUE(SaveCheckpoint(probe, Meta(10), good.stages(be)).ok());
  uint64_t bytes = 0;
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(probe)) {
    if (!e.is_regular_file()) continue;
    bytes += (e.file_size() + 4095) / 4096 * 4096;
    ++files;
  }
  const uint64_t room = bytes + 4 * 4096;  // one checkpoint and a little, not two
  const model::ParameterSet want = MakeSet(be, Model4(), model::StageLayout::Full(Model4()), 7);
  TwoStages newer(be, 8);
  const std::string mnt = tmp.path() + "/tmpfs";
  fs::create_directories(mnt);
  const int rc = InChild([&] {
    if (::unshare(CLONE_NEWNS) != 0) return 77;
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    const std::string options = fmt::format("size={}", room);
    if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, options.c_str()) != 0) return 77;
    if (!SaveCheckpoint(mnt, Meta(10), good.stages(be)).ok()) return 4;
    auto r = SaveCheckpoint(mnt, Meta(20), newer.stages(be));
    if (r.ok()) return 1;
    if (r.status().code() != StatusCode::kResourceExhausted) return 2;
    return CheckOnlyStepTen(be, mnt, want).empty() ? 0 : 5;
  });
  if (rc == 77) GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace here";
  EXPECT_EQ(rc, 0) << "1: the save fitted (" << bytes << " bytes in " << files
                   << " files per checkpoint, tmpfs of " << room
                   << "), 2: not kResourceExhausted, 4: the first save failed, 5: the failed save "
                      "left something or step 10 does not load";
}

}  // namespace
}  // namespace motley::train
