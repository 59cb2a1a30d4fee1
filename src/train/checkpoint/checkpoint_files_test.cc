// What a checkpoint folder may and may not touch: pruning and stale temporary folders delete only
// folders carrying motley's marker file; `/` and the home directory are refused as roots;
// `latest` never moves to an older step; RemoveMarkedCheckpoints (--overwrite) keeps what motley
// did not write.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_test_util.h"

namespace motley::train {
namespace {

namespace fs = std::filesystem;
using testing::Layout;
using testing::MakeSet;
using testing::Model4;
using testing::TempDir;

CheckpointMetadata Meta(int64_t step) {
  CheckpointMetadata md;
  md.step = step;
  md.model = Model4();
  return md;
}

struct Whole {
  model::ParameterSet set;
  Whole(tensor::Backend& be, uint64_t seed)
      : set(MakeSet(be, Model4(), model::StageLayout::Full(Model4()), seed)) {}
  std::vector<StageToSave> stages(tensor::Backend& be) { return {{&be, &set}}; }
};

// A folder that looks like a checkpoint but is the user's: no marker file.
void UserFolder(const std::string& dir) {
  fs::create_directories(dir);
  testing::WriteBytes(dir + "/" + kSidecarFile, "{\"mine\": true}");
  testing::WriteBytes(dir + "/notes.txt", "do not delete");
}

TEST(CheckpointFiles, PruningDeletesOnlyMarkedFolders) {
  backend::CpuBackend be;
  TempDir tmp;
  Whole w(be, 7);
  UserFolder(tmp.path() + "/step-00000001");
  SaveOptions opt;
  opt.keep_last = 1;
  for (int64_t step : {2, 3, 4}) {
    ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(step), w.stages(be), opt).ok());
  }
  EXPECT_EQ(testing::ReadBytes(tmp.path() + "/step-00000001/notes.txt"), "do not delete");
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-00000002"));
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-00000003"));
  EXPECT_TRUE(fs::is_regular_file(tmp.path() + "/step-00000004/" + kMarkerFile));
  const auto marked = MarkedCheckpoints(tmp.path());
  ASSERT_EQ(marked.size(), 1U);
  EXPECT_EQ(marked[0].first, 4);
}

TEST(CheckpointFiles, AStaleTemporaryFolderIsReplacedOnlyWhenMotleyWroteIt) {
  backend::CpuBackend be;
  TempDir tmp;
  Whole w(be, 7);
  const std::string stale = tmp.path() + "/step-00000005.tmp";
  UserFolder(stale);
  auto refused = SaveCheckpoint(tmp.path(), Meta(5), w.stages(be));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("not a folder motley wrote"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(testing::ReadBytes(stale + "/notes.txt"), "do not delete");

  fs::remove_all(stale);  // an interrupted save of motley's: marked, with a partial file
  fs::create_directories(stale);
  testing::WriteBytes(stale + "/" + kMarkerFile, "");
  testing::WriteBytes(stale + "/model-00001-of-00001.safetensors", "partial");
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(5), w.stages(be)).ok());
  EXPECT_FALSE(fs::exists(stale));
  // The same for a committed folder of the same step that motley did not write.
  UserFolder(tmp.path() + "/step-00000006");
  auto again = SaveCheckpoint(tmp.path(), Meta(6), w.stages(be));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("never replaces what it did not write"),
            std::string::npos)
      << again.status().message();
  EXPECT_EQ(testing::ReadBytes(tmp.path() + "/step-00000006/notes.txt"), "do not delete");
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-00000006.tmp"));  // the failed save cleaned up
  EXPECT_EQ(*LatestStep(tmp.path()), 5);
}

TEST(CheckpointFiles, TheFileSystemRootAndTheHomeDirectoryAreRefused) {
  TempDir tmp;
  for (const char* root : {"/", "//", "/tmp/.."}) {
    const Status s = CheckCheckpointRoot(root);
    ASSERT_FALSE(s.ok()) << root;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("file-system root"), std::string::npos) << s.message();
  }
  const char* old_home = std::getenv("HOME");
  const std::string saved_home = old_home != nullptr ? old_home : "";
  const std::string home = tmp.path() + "/home";
  fs::create_directories(home);
  fs::create_directory_symlink(home, tmp.path() + "/home-link");
  ::setenv("HOME", home.c_str(), 1);
  for (const std::string& root : {home, home + "/", tmp.path() + "/home-link", home + "/sub/.."}) {
    const Status s = CheckCheckpointRoot(root);
    ASSERT_FALSE(s.ok()) << root;
    EXPECT_NE(s.message().find("home directory"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(CheckCheckpointRoot(home + "/checkpoints").ok());
  backend::CpuBackend be;
  Whole w(be, 7);
  auto saved = SaveCheckpoint(home, Meta(1), w.stages(be));
  EXPECT_FALSE(saved.ok());
  EXPECT_FALSE(fs::exists(home + "/step-00000001.tmp"));
  if (old_home != nullptr) {
    ::setenv("HOME", saved_home.c_str(), 1);
  } else {
    ::unsetenv("HOME");
  }
  testing::WriteBytes(tmp.path() + "/file", "x");
  EXPECT_FALSE(CheckCheckpointRoot(tmp.path() + "/file").ok());  // not a folder
}

TEST(CheckpointFiles, LatestNeverMovesBackwards) {
  backend::CpuBackend be;
  TempDir tmp;
  Whole w(be, 7);
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(10), w.stages(be)).ok());
  auto older = SaveCheckpoint(tmp.path(), Meta(5), w.stages(be));
  ASSERT_FALSE(older.ok());
  EXPECT_EQ(older.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(older.status().message().find("names step-00000010, newer than the step 5"),
            std::string::npos)
      << older.status().message();
  EXPECT_EQ(testing::ReadBytes(tmp.path() + "/latest"), "step-00000010\n");
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-00000005"));
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-00000005.tmp"));
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(10), w.stages(be)).ok());  // the same step: fine
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(11), w.stages(be)).ok());
  EXPECT_EQ(*LatestStep(tmp.path()), 11);
}

TEST(CheckpointFiles, RemoveMarkedCheckpointsKeepsWhatMotleyDidNotWrite) {
  backend::CpuBackend be;
  TempDir tmp;
  Whole w(be, 7);
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(1), w.stages(be)).ok());
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(2), w.stages(be)).ok());
  UserFolder(tmp.path() + "/step-00000003");
  testing::WriteBytes(tmp.path() + "/README", "mine");
  auto removed = RemoveMarkedCheckpoints(tmp.path());
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, 2);
  EXPECT_FALSE(fs::exists(tmp.path() + "/latest"));
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-00000001"));
  EXPECT_TRUE(fs::exists(tmp.path() + "/step-00000003/notes.txt"));
  EXPECT_TRUE(fs::exists(tmp.path() + "/README"));
  EXPECT_FALSE(RemoveMarkedCheckpoints("/").ok());
}

}  // namespace
}  // namespace motley::train
