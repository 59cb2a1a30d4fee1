// A save that runs out of room through the binary (CTest label `fault`): `motley train --resume`
// under a file-size limit (ulimit -f in the shell that starts it; motley ignores SIGXFSZ, so the
// write fails with EFBIG like a full disk) fails with an error naming the cause, leaves no
// partial folder, and the last good checkpoint still loads.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/file_util.h"

namespace {

namespace fs = std::filesystem;

TEST(CliFault, AFullDiskDuringASaveLeavesTheLastGoodCheckpoint) {
  const fs::path dir =
      fs::temp_directory_path() / ("motley_cli_fault_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string run = (dir / "run.yaml").string();
  ASSERT_TRUE(motley::WriteFileAtomic(run, R"(cluster:
  name: local-cpu
  device_types:
    - {name: cpu, vendor: cpu, peak_flops: 100 GFLOPS, memory: 4 GiB, memory_bandwidth: 25 GB/s}
  nodes:
    - {name: local, device_type: cpu, device_count: 1}
model: tiny
train: {global_batch: 4, seq_len: 32, steps: 2, val_every: 0, threads: 1}
)")
                  .ok());
  const std::string ckpt = (dir / "ckpt").string();
  const std::string motley = MOTLEY_BINARY;
  auto sh = [&](const std::string& cmd) {
    const int status = std::system(
        ("/bin/bash -c '" + cmd + "' >" + (dir / "out").string() + " 2>" + (dir / "err").string())
            .c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(sh(motley + " train " + run + " --checkpoint-dir " + ckpt), 0);
  // 64 KiB per file: the metrics-free run writes nothing else, every checkpoint file of the tiny
  // model but the small JSON ones is larger.
  const int rc = sh("ulimit -f 64; exec " + motley + " train " + run +
                    " --steps 4 --resume --checkpoint-dir " + ckpt);
  const std::string err = motley::ReadFile((dir / "err").string()).value();
  EXPECT_EQ(rc, 1) << err;  // kResourceExhausted
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;
  std::string left;
  for (const auto& e : fs::directory_iterator(ckpt)) {
    const std::string name = e.path().filename().string();
    if (name != "latest" && name != "step-00000002") left += " " + name;
  }
  EXPECT_EQ(left, "") << "the failed save left these behind";
  EXPECT_EQ(motley::ReadFile(ckpt + "/latest").value(), "step-00000002\n");
  EXPECT_EQ(sh(motley + " eval " + run + " --checkpoint " + ckpt + " --batches 1"), 0)
      << motley::ReadFile((dir / "err").string()).value();
  fs::remove_all(dir);
}

}  // namespace
