// The cases of issue 17 through the `motley` binary: each must end with the documented exit code
// (docs/exit-codes.md: 2 for input and usage errors, 1 for resource limits), never a signal, a
// hang (every command runs under `timeout`) or an unnamed error, and print an error that names
// the file, field or option and the reason. Counts of the cases by kind are printed at the end.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "core/sanitized_build.h"
#include "motley_source_dir.h"

namespace {

constexpr bool kSanitized = motley::kSanitizedBuild;

struct Outcome {
  bool exited = false;  // false: killed by a signal, or the timeout fired
  int exit_code = -1;
  std::string err;
};

class HardeningCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("motley_hardening_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    for (const auto& [kind, n] : counts_)
      std::printf("malformed inputs: %3d  %s\n", n, kind.c_str());
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Write(const std::string& name, const std::string& text) const {
    EXPECT_TRUE(motley::WriteFileAtomic(Path(name), text).ok());
    return Path(name);
  }

  // Runs `motley ARGS` in the test folder, at most 120 s (timeout(1) ends a hang with 124).
  Outcome Run(const std::string& args, const std::string& env = "") const {
    const std::string cmd = "cd " + dir_.string() + " && " + env + " timeout -s KILL 120 " +
                            MOTLEY_BINARY + " " + args + " >" + Path("stdout") + " 2>" +
                            Path("stderr");
    const int status = std::system(cmd.c_str());
    Outcome o;
    o.exited = WIFEXITED(status) && WEXITSTATUS(status) != 124 && WEXITSTATUS(status) != 137;
    o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    motley::Result<std::string> err = motley::ReadFile(Path("stderr"));
    o.err = err.ok() ? *err : std::string();
    return o;
  }

  // Runs and checks the exit code and the message; counts the case under `kind`.
  void Expect(const std::string& kind, const std::string& args, int code,
              const std::vector<std::string>& want, const std::string& env = "") {
    const Outcome o = Run(args, env);
    ++counts_[kind];
    EXPECT_TRUE(o.exited) << args << ": killed by a signal or hung\n" << o.err;
    EXPECT_EQ(o.exit_code, code) << args << "\n" << o.err;
    for (const std::string& w : want) {
      EXPECT_NE(o.err.find(w), std::string::npos)
          << args << "\n  got:  " << o.err << "  want: " << w;
    }
    EXPECT_EQ(o.err.find("check failed"), std::string::npos) << args << ": reached a MOTLEY_CHECK";
    EXPECT_EQ(o.err.find("internal error"), std::string::npos) << args;
  }

  std::map<std::string, int> counts_;  // cases of this test by kind, printed at its end
  std::filesystem::path dir_;
};

// The tiny model on one CPU device (not emulated: serial and --plan runs use the CPU backend).
std::string TinyRun(const std::string& model, const std::string& train_extra,
                    const std::string& device_extra = "") {
  return "cluster:\n  name: local\n  device_types:\n"
         "    - {name: cpu, vendor: cpu, peak_flops: 100 GFLOPS, memory: 4 GiB, "
         "memory_bandwidth: 25 GB/s" +
         device_extra +
         "}\n"
         "  nodes:\n    - {name: n, device_type: cpu, device_count: 1}\n"
         "model: " +
         model +
         "\n"
         "train:\n  global_batch: 4\n  seq_len: 32\n  steps: 2\n  val_every: 0\n  threads: 1\n" +
         train_extra;
}

constexpr const char* kTwoDeviceCluster = R"(name: two
device_types:
  - {name: emu, vendor: cpu, peak_flops: 10 GFLOPS, memory: 1 GiB, memory_bandwidth: 4 GB/s,
     emulated: {flops: 10 GFLOPS, memory_bandwidth: 4 GB/s}}
link_classes:
  - {name: shm, latency: 5 us, bandwidth: 2 GB/s}
nodes:
  - {name: host, device_type: emu, device_count: 2, intra_link: shm}
)";

constexpr const char* kPlan2 = R"({"format": "motley-plan", "version": 1, "pipelines": [
  {"micro_batches": 2, "micro_batch_size": 2, "stages": [
    {"first_block": 0, "num_blocks": 1, "has_embedding": true, "has_head": false, "devices": [0]},
    {"first_block": 1, "num_blocks": 1, "has_embedding": false, "has_head": true, "devices": [1]}]}]}
)";

TEST_F(HardeningCliTest, SizesAndCountsOutOfRange) {
  Write("b62.yaml", TinyRun("tiny", "")
                        .replace(TinyRun("tiny", "").find("global_batch: 4"), 15,
                                 "global_batch: 4611686018427387904"));
  for (const char* cmd : {"validate b62.yaml", "train b62.yaml"}) {
    Expect(
        "run file: size out of range", cmd, 2,
        {"b62.yaml: train.global_batch: must be in [1, 1099511627776], got 4611686018427387904"});
  }
  Write("vocab.yaml", TinyRun("{preset: tiny, vocab_size: 4294967296}", ""));
  Expect("run file: size out of range", "validate vocab.yaml", 2,
         {"vocab.yaml: model.vocab_size: must be at most 2147483648"});
  Write("threads.yaml",
        TinyRun("tiny", "").replace(TinyRun("tiny", "").find("threads: 1"), 10, "threads: 100000"));
  Expect("run file: size out of range", "train threads.yaml", 2,
         {"threads.yaml: train.threads: must be in [0, 1024], got 100000"});
}

TEST_F(HardeningCliTest, TooLargeForTheHostOrTheDeviceBeforeSetUp) {
  // A batch of 2^33 sequences and a vocabulary of 2^31 pass validation, and fail before any
  // allocation with the host's and the stage's bytes.
  Write("b33.yaml",
        TinyRun("tiny", "")
            .replace(TinyRun("tiny", "").find("global_batch: 4"), 15, "global_batch: 8589934592"));
  Expect("memory: too large before set-up", "validate b33.yaml", 0, {});
  Expect("memory: too large before set-up", "train b33.yaml --micro-batches 8589934592", 1,
         {"this host (serial training on the CPU): needs at least", "but has"});
  Write("v31.yaml", TinyRun("{preset: tiny, vocab_size: 2147483648}", "  data: {format: u32}\n"));
  Expect("memory: too large before set-up", "train v31.yaml", 1,
         {"this host (serial training on the CPU): needs at least", "parameters, gradients"});
  // A device of 2 MiB cannot hold the small model's stage: named with its bytes.
  Write("two.yaml",
        std::string(kTwoDeviceCluster)
            .replace(std::string(kTwoDeviceCluster).find("memory: 1 GiB"), 13, "memory: 2 MiB"));
  Write("run2.yaml",
        "cluster: two.yaml\nmodel: {preset: small, num_blocks: 2}\n"
        "train: {global_batch: 4, seq_len: 64, steps: 2, val_every: 0}\n");
  Write("plan2.json", kPlan2);
  Expect("memory: too large before set-up",
         "profile b33.yaml -o p.json --micro-batches 1099511627776", 1,
         {"this host (profiling micro-batch 1099511627776 x 32): needs at least"});
  Expect("memory: too large before set-up", "train run2.yaml --plan plan2.json", 1,
         {"device 0 (type 'emu', pipelines[0].stages[0], micro-batch 2 x 64): needs at least",
          "but has 2097152 bytes"});
}

TEST_F(HardeningCliTest, AbsurdPhysicalQuantities) {
  const std::string cluster = kTwoDeviceCluster;
  Write("lat.yaml",
        std::string(cluster).replace(cluster.find("latency: 5 us"), 13, "latency: 1e100 s"));
  Write("run-lat.yaml",
        "cluster: lat.yaml\nmodel: {preset: small, num_blocks: 2}\n"
        "train: {global_batch: 4, seq_len: 64, steps: 2}\n");
  Expect("cluster: quantity out of range", "plan run-lat.yaml -o p.json --quiet", 2,
         {"lat.yaml: link_classes[0].latency: must be in [0 s, 60 s], got 1e+100 s"});
  Write("mem.yaml",
        std::string(cluster).replace(cluster.find("memory: 1 GiB"), 13, "memory: 1e30"));
  Write("run-mem.yaml",
        "cluster: mem.yaml\nmodel: {preset: small, num_blocks: 2}\n"
        "train: {global_batch: 4, seq_len: 64, steps: 2}\n");
  Expect("cluster: quantity out of range", "plan run-mem.yaml -o p.json --quiet", 2,
         {"mem.yaml: device_types[0].memory: must be in [1 MiB, 1 PiB], got 1e+30 bytes"});
  // Profile times of 1e308 s.
  Write("run-ok.yaml",
        "cluster: two.yaml\nmodel: small\n"
        "train: {global_batch: 4, seq_len: 64, steps: 2}\n");
  Write("two.yaml", cluster);
  Write("prof.json", R"({"format": "motley-profile", "version": 1,
    "model": {"hidden": 128, "num_heads": 4, "num_kv_heads": 4, "ffn_hidden": 384, "vocab_size": 256},
    "devices": [{"device_type": "emu", "entries": [{"tp": 1, "micro_batch_size": 1, "seq_len": 64,
      "block_forward_s": 1e308, "block_backward_s": 1e308}]}]})");
  Expect("profile: time out of range", "plan run-ok.yaml -o p.json --quiet --profile prof.json", 2,
         {"prof.json: devices[0].entries[0].block_forward_s: must be at most 86400, got 1e+308"});
  // Times of 1e-300 s are in range: the planner must cope (they reached a CHECK in evaluate.cc).
  Write("tiny-prof.json", R"({"format": "motley-profile", "version": 1,
    "model": {"hidden": 128, "num_heads": 4, "num_kv_heads": 4, "ffn_hidden": 384, "vocab_size": 256},
    "devices": [{"device_type": "emu", "entries": [{"tp": 1, "micro_batch_size": 1, "seq_len": 64,
      "block_forward_s": 1e-300, "block_backward_s": 1e-300}]}]})");
  Expect("profile: extreme in-range times",
         "plan run-ok.yaml -o p.json --quiet --profile tiny-prof.json", 0, {});
  // A scenario rate of 1e-300 (the wall clock reported MFU 434%).
  Write("plan-ok.json", kPlan2);
  Write("run-small.yaml",
        "cluster: two.yaml\nmodel: {preset: small, num_blocks: 2}\n"
        "train: {global_batch: 4, seq_len: 64, steps: 2, val_every: 0}\n");
  Write("rate.yaml", "- {step: 1, device: 0, rate: 1e-300}\n");
  Expect("scenario: rate out of range",
         "train run-small.yaml --plan plan-ok.json --clock wall --inject rate.yaml", 2,
         {"rate.yaml: events[0].rate: must be in [0.001, 1]", "got 1e-300"});
}

TEST_F(HardeningCliTest, PlansThatWrapOrRepeatKeys) {
  Write("two.yaml", kTwoDeviceCluster);
  Write("run.yaml",
        "cluster: two.yaml\nmodel: {preset: small, num_blocks: 2}\n"
        "train: {global_batch: 16, seq_len: 64, steps: 2}\n");
  Write("wrap.json", R"({"format": "motley-plan", "version": 1, "pipelines": [
    {"micro_batches": 4611686018427387906, "micro_batch_size": 4, "stages": [
      {"first_block": 0, "num_blocks": 2, "has_embedding": true, "has_head": true, "devices": [0]}]}]})");
  Expect(
      "plan: arithmetic overflow", "validate run.yaml --plan wrap.json", 2,
      {"wrap.json: pipelines[0]: micro_batches 4611686018427387906 * micro_batch_size 4 exceeds"});
  Write("dup.json", R"({"format": "motley-plan", "version": 1, "pipelines": [
    {"micro_batches": 16, "micro_batch_size": 1, "micro_batch_size": 2, "stages": [
      {"first_block": 0, "num_blocks": 2, "has_embedding": true, "has_head": true, "devices": [0]}]}]})");
  Expect("plan: duplicate key", "validate run.yaml --plan dup.json", 2,
         {"dup.json: pipelines[0].micro_batch_size: key given twice"});
  Write("deep.json", std::string(100000, '['));
  Expect("plan: nesting", "validate run.yaml --plan deep.json", 2,
         {"deep.json: arrays and objects nested deeper than 64 levels"});
}

TEST_F(HardeningCliTest, StrictYamlDocuments) {
  Write("two-docs.yaml", TinyRun("tiny", "") + "---\ntrain: {steps: 1000}\n");
  Expect("run file: second document", "validate two-docs.yaml", 2,
         {"two-docs.yaml:", "a second YAML document ('---')"});
  Write("dup.yaml", TinyRun("tiny", "") + "model: small\n");
  Expect("run file: duplicate key", "validate dup.yaml", 2, {"dup.yaml: model: key given twice"});
  std::string deep = "cluster: ";
  deep += std::string(600, '[');
  Write("deep.yaml", deep);
  Expect("run file: nesting", "validate deep.yaml", 2,
         {"deep.yaml:1: mappings and lists nested deeper than 64 levels"});
}

TEST_F(HardeningCliTest, SpecialAndHugeFiles) {
  ASSERT_EQ(::mkfifo(Path("fifo.yaml").c_str(), 0600), 0);
  Expect("file: special file", "validate fifo.yaml", 2,
         {"fifo.yaml: is a FIFO (named pipe), not a regular file"});
  Expect("file: special file", "validate /dev/zero", 2,
         {"/dev/zero: is a character device, not a regular file"});
  Expect("file: special file", "validate " + dir_.string(), 2,
         {"is a directory, not a regular file"});
  Expect("file: missing", "validate nope.yaml", 2, {"nope.yaml: cannot open: No such file"});
  // Token files: a FIFO and /dev/zero as train.data.train_path.
  ASSERT_EQ(::mkfifo(Path("tokens.fifo").c_str(), 0600), 0);
  Write("fifo-data.yaml", TinyRun("tiny", "  data: {format: u16, train_path: tokens.fifo}\n"));
  Expect("token file: special file", "train fifo-data.yaml", 2,
         {"tokens.fifo: is a FIFO (named pipe), not a regular file (expected a token file)"});
  Write("zero-data.yaml", TinyRun("tiny", "  data: {format: u16, train_path: /dev/zero}\n"));
  Expect("token file: special file", "train zero-data.yaml", 2,
         {"/dev/zero: is a character device"});
  // A run file above 64 MiB (sparse: refused from its size).
  Write("huge.yaml", TinyRun("tiny", ""));
  std::filesystem::resize_file(Path("huge.yaml"), (size_t{64} << 20) + 1);
  Expect("file: above 64 MiB", "validate huge.yaml", 2,
         {"huge.yaml: 67108865 bytes, larger than the 64 MiB limit"});
}

TEST_F(HardeningCliTest, LargeTokenFileIsMappedNotRead) {
  // 4 GiB of u16 ids (sparse: zeros). Read whole into int32 it needed 8 GiB of heap; mapped, the
  // process's data segment stays small: under a 2 GiB data limit (ulimit -d) training works.
  Write("big.bin", "");
  std::filesystem::resize_file(Path("big.bin"), size_t{4} << 30);
  Write("big.yaml", TinyRun("{preset: tiny, vocab_size: 65536}",
                            "  data: {format: u16, train_path: big.bin, val_fraction: 0.01}\n"));
  // Under AddressSanitizer the shadow memory alone exceeds any data limit: run without one there.
  const Outcome o = Run("train big.yaml --steps 1", kSanitized ? "" : "ulimit -d 2097152 &&");
  EXPECT_TRUE(o.exited) << o.err;
  EXPECT_EQ(o.exit_code, 0) << o.err;
  ++counts_["token file: 4 GiB (mapped)"];
}

TEST_F(HardeningCliTest, CommandLineNumbersAndUsage) {
  Write("run.yaml", TinyRun("tiny", ""));
  Write("two.yaml", kTwoDeviceCluster);
  Write("run2.yaml",
        "cluster: two.yaml\nmodel: {preset: small, num_blocks: 2}\n"
        "train: {global_batch: 4, seq_len: 64, steps: 2, val_every: 0}\n");
  Write("plan2.json", kPlan2);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate run.yaml --checkpoint ck --prompt a --temperature nan",
       "--temperature: expected a finite number, got 'nan'"},
      {"generate run.yaml --checkpoint ck --prompt a --temperature inf",
       "--temperature: expected a finite number, got 'inf'"},
      {"generate run.yaml --checkpoint ck --prompt a --temperature -1",
       "--temperature: must be in [0, 100], got -1"},
      {"generate run.yaml --checkpoint ck --prompt a --tokens 99999999999",
       "--tokens: must be in [0, 1048576]"},
      {"predict run2.yaml plan2.json --straggler 0=inf",
       "--straggler 0=inf: the rate (times slower) must be in [1, 1000], got inf"},
      {"predict run2.yaml plan2.json --straggler 0=nan", "--straggler 0=nan: the rate"},
      {"predict run2.yaml plan2.json --straggler 3abc=2",
       "--straggler 3abc=2: expected DEVICE_ID=RATE"},
      {"predict run2.yaml plan2.json --straggler 7=2", "--straggler 7=2: device 7 does not exist"},
      {"train run2.yaml --plan plan2.json --trace t.json --trace-steps -1",
       "--trace-steps: must be in [1, 1099511627776], got -1"},
      {"plan run2.yaml -o p.json --top -1", "--top: must be in [1, 1000000], got -1"},
      {"train run.yaml --threads 100000", "--threads: must be in [1, 1024], got 100000"},
      {"train run.yaml --steps 0", "--steps: must be in [1, 1099511627776], got 0"},
      {"train run.yaml --micro-batches 3", "train.global_batch: 4 is not divisible into 3"},
      {"schedule --stages 100000 --micro-batches 100000", "more than 16777216"},
      {"profile run.yaml -o p.json --repeats 0", "--repeats: must be in [1, 1000000], got 0"},
      {"profile run.yaml -o p.json --micro-batches 1,2,0", "--micro-batches: must be in [1,"},
      {"train run.yaml --no-such-option", "--no-such-option"},
      {"validate", "run is required"},
      {"train run2.yaml --plan plan2.json --auto-plan",
       "--auto-plan and --plan exclude each other"},
      {"train run.yaml --trace t.json", "--trace needs --plan or --auto-plan"},
      {"train run.yaml --plan plan2.json --micro-batches 2", "--micro-batches does not apply"},
  };
  for (const auto& [args, want] : cases) Expect("command line: number or usage", args, 2, {want});
}

TEST_F(HardeningCliTest, NegativeSidecarStepIsRefused) {
  Write("run.yaml", TinyRun("tiny", "  checkpoint: {dir: ck}\n"));
  ASSERT_EQ(Run("train run.yaml").exit_code, 0);
  const std::string sidecar = Path("ck/step-00000002/checkpoint.json");
  std::string text = motley::ReadFile(sidecar).value();
  const size_t key = text.find("\"step\":");
  ASSERT_NE(key, std::string::npos) << text;
  size_t begin = key + 7;
  while (text[begin] == ' ') ++begin;
  size_t end = begin;
  while (std::isdigit(static_cast<unsigned char>(text[end])) != 0) ++end;
  text.replace(begin, end - begin, "-5");
  ASSERT_TRUE(motley::WriteFileAtomic(sidecar, text).ok());
  Expect("checkpoint: sidecar out of range", "train run.yaml --resume", 2,
         {"checkpoint.json: fields 'step' (-5) and 'consumed_samples'", "must not be negative"});
}

}  // namespace
