// Tests of the run-time data folder lookup: MOTLEY_DATA_DIR wins, otherwise share/motley of the
// executable's folder and of every folder above it, in that order; a missing file is kNotFound
// naming every folder looked in.
#include "core/install_paths.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace motley {
namespace {

TEST(InstallPathsTest, CandidatesWalkUpFromTheExecutable) {
  ::unsetenv("MOTLEY_DATA_DIR");
  const std::string exe = ExecutableDir();
  ASSERT_FALSE(exe.empty());
  const std::vector<std::string> c = DataDirCandidates();
  ASSERT_GE(c.size(), 2U);
  EXPECT_EQ(c.front(), (std::filesystem::path(exe) / "share" / "motley").string());
  EXPECT_EQ(c[1], (std::filesystem::path(exe).parent_path() / "share" / "motley").string());
  EXPECT_EQ(c.back(), "/share/motley");
}

TEST(InstallPathsTest, EnvironmentNamesTheFolder) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("motley_install_paths_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "data");
  std::ofstream(dir / "data" / "probe.txt") << "x";
  ::setenv("MOTLEY_DATA_DIR", dir.c_str(), 1);
  EXPECT_EQ(DataDirCandidates(), std::vector<std::string>{dir.string()});
  auto found = FindDataFile("data/probe.txt");
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ(*found, (dir / "data" / "probe.txt").string());
  auto missing = FindDataFile("data/none.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir.string()), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find("MOTLEY_DATA_DIR"), std::string::npos);
  ::unsetenv("MOTLEY_DATA_DIR");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace motley
