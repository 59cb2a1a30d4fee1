// The fixture of the `motley` binary's tests (cli_test.cc, summary_json_test.cc): a temporary
// folder per test, files written into it, and `motley ARGS` run with stdout and stderr captured.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "motley_source_dir.h"

namespace motley::cli_test {

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("motley_cli_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::string Write(const std::string& name, const std::string& text) const {
    EXPECT_TRUE(motley::WriteFileAtomic(Path(name), text).ok());
    return Path(name);
  }

  // Runs `motley ARGS` (or, with `command`, that shell command line) with stdout and stderr
  // captured in files.
  Outcome Run(const std::string& args, const std::string& command = "") const {
    const std::string cmd = (command.empty() ? std::string(MOTLEY_BINARY) + " " + args : command) +
                            " >" + Path("stdout") + " 2>" + Path("stderr");
    const int status = std::system(cmd.c_str());
    Outcome o;
    o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    o.out = motley::ReadFile(Path("stdout")).value();
    o.err = motley::ReadFile(Path("stderr")).value();
    return o;
  }

  // Runs `motley VERB` (predict or simulate) on the hetero-4 example and its balanced plan with
  // `extra` options and `--summary FILE`; expects success, the line naming FILE, and a summary of
  // `format`, version 1; returns the printed outcome and the parsed summary.
  std::pair<Outcome, nlohmann::json> RunExampleWithSummary(const std::string& verb,
                                                           const std::string& extra,
                                                           const std::string& format) const {
    const std::string examples = std::string(MOTLEY_SOURCE_DIR) + "/examples/";
    const std::string summary = Path(verb + ".json");
    Outcome o = Run(verb + " " + examples + "runs/hetero-4.yaml " + examples +
                    "plans/hetero-4-balanced.json " + extra + " --summary " + summary);
    EXPECT_EQ(o.exit_code, 0) << o.err << o.out;
    EXPECT_NE(o.out.find("summary written to " + summary), std::string::npos) << o.out;
    auto text = motley::ReadFile(summary);
    nlohmann::json j = text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
    EXPECT_EQ(j["format"], format) << summary;
    EXPECT_EQ(j["version"], 1) << summary;
    return {o, j};
  }

  std::filesystem::path dir_;
};

}  // namespace motley::cli_test
