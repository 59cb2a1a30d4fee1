// Shared set-up of the multi-rank runtime tests: a tiny 4-block model on the shipped corpus, an
// 8-device CPU cluster of two 4-device nodes, plan builders, and the serial oracle's per-step
// losses (train::Train, the single-device loop, read back from its metrics file).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/plan.h"
#include "spec/plan_test_util.h"
#include "spec/run_file.h"
#include "spec/train_spec.h"
#include "train/trainer.h"

namespace motley::testing {

// The tiny 4-block model (spec/plan_test_util.h).
inline spec::ModelSpec TinyModel() { return spec::test_util::TinyFourBlockModel(); }

inline spec::TrainSpec TinyTrain(int64_t steps) {
  spec::TrainSpec t;
  t.global_batch = 12;
  t.seq_len = 16;
  t.steps = steps;
  t.seed = 5;
  t.val_every = 0;
  t.threads = 1;
  t.optimizer.lr = 3e-3F;
  t.optimizer.min_lr = 3e-4F;
  t.optimizer.warmup_steps = 3;
  t.optimizer.grad_clip = 1.0F;
  return t;
}

inline constexpr const char* kClusterYaml = R"(
name: two-node-cpu
device_types:
  - {name: cpu, vendor: cpu, peak_flops: 50 GFLOPS, memory: 1 GiB, memory_bandwidth: 10 GB/s}
link_classes:
  - {name: shm, latency: 1 us, bandwidth: 10 GB/s}
  - {name: eth, latency: 20 us, bandwidth: 1 GB/s}
nodes:
  - {name: n0, device_type: cpu, device_count: 4, intra_link: shm, nics: [eth]}
  - {name: n1, device_type: cpu, device_count: 4, intra_link: shm, nics: [eth]}
islands:
  - {name: all, nodes: [n0, n1], link: eth}
)";

// An emulated cluster (docs/architecture.md §6) of 2 fast devices and 4 devices 4x slower, in two
// nodes. `memory` is the capacity of the slow devices.
inline std::string EmulatedClusterYaml(const std::string& slow_memory = "1 GiB") {
  return R"(
name: emulated-two-speed
device_types:
  - {name: fast, vendor: cpu, peak_flops: 40 GFLOPS, memory: 1 GiB, memory_bandwidth: 20 GB/s,
     emulated: {flops: 40 GFLOPS, memory_bandwidth: 20 GB/s}}
  - {name: slow, vendor: cpu, peak_flops: 10 GFLOPS, memory: )" +
         slow_memory + R"(, memory_bandwidth: 5 GB/s,
     emulated: {flops: 10 GFLOPS, memory_bandwidth: 5 GB/s}}
link_classes:
  - {name: shm, latency: 2 us, bandwidth: 10 GB/s}
  - {name: eth, latency: 30 us, bandwidth: 1 GB/s}
nodes:
  - {name: fast-node, device_type: fast, device_count: 2, intra_link: shm, nics: [eth]}
  - {name: slow-node, device_type: slow, device_count: 4, intra_link: shm, nics: [eth]}
islands:
  - {name: all, nodes: [fast-node, slow-node], link: eth}
)";
}

inline spec::RunFile TinyRunOn(const std::string& cluster_yaml, int64_t steps) {
  spec::RunFile run;
  auto cluster = spec::ParseClusterSpec(cluster_yaml, "test-cluster");
  EXPECT_TRUE(cluster.ok()) << cluster.status().message();
  if (cluster.ok()) run.cluster = *cluster;
  run.model = TinyModel();
  run.train = TinyTrain(steps);
  return run;
}

inline spec::RunFile TinyRun(int64_t steps) { return TinyRunOn(kClusterYaml, steps); }
inline spec::RunFile TinyEmulatedRun(int64_t steps) {
  return TinyRunOn(EmulatedClusterYaml(), steps);
}

using spec::test_util::Stage;

inline spec::PipelinePlan Pipeline(std::vector<spec::StagePlan> stages, int64_t m, int64_t b) {
  spec::PipelinePlan p;
  p.stages = std::move(stages);
  p.micro_batches = m;
  p.micro_batch_size = b;
  return p;
}

inline spec::Plan MakePlan(std::vector<spec::PipelinePlan> pipelines, std::string name) {
  spec::Plan plan;
  plan.pipelines = std::move(pipelines);
  plan.source = std::move(name);
  return plan;
}

// A pipeline over device groups `groups` (each its devices) with `blocks[s]` blocks on virtual
// stage s (group s mod p): interleaved 1F1B when blocks has more entries than groups.
inline spec::PipelinePlan InterleavedPipeline(const std::vector<std::vector<int>>& groups,
                                              const std::vector<int64_t>& blocks, int64_t m,
                                              int64_t b) {
  std::vector<spec::StagePlan> stages;
  int64_t first = 0;
  for (size_t s = 0; s < blocks.size(); ++s) {
    stages.push_back(spec::test_util::Stage(first, blocks[s], s == 0, s + 1 == blocks.size(),
                                            groups[s % groups.size()]));
    first += blocks[s];
  }
  spec::PipelinePlan pipe = Pipeline(std::move(stages), m, b);
  pipe.chunks = static_cast<int>(blocks.size() / groups.size());
  return pipe;
}

// A fresh path in the test's temporary folder: nothing exists there on return. The folder is
// named by process id, so a file or folder a dead process of the same id left there (a killed
// run, another test suite on this machine earlier) is removed whole.
inline std::string TempPath(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("motley_parallel_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::filesystem::remove_all(path);
  return path.string();
}

// The JSON objects of a JSONL file.
inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

// Per-step losses of the serial single-device loop (the oracle), one micro-batch per step.
inline std::vector<double> SerialLosses(const spec::RunFile& run) {
  spec::TrainSpec train = run.train;
  train.metrics_path = TempPath("serial_" + std::to_string(train.steps) + ".jsonl");
  train::TrainerOptions options;
  options.out = nullptr;
  auto summary = train::Train(run.model, train, options);
  EXPECT_TRUE(summary.ok()) << summary.status().message();
  std::vector<double> losses;
  for (const auto& j : ReadJsonLines(train.metrics_path)) losses.push_back(j.at("loss"));
  return losses;
}

// Checks losses[i] (step first_step + i) against want[step - 1] (a run of the same job that was
// not interrupted) within `rel_tol` relative, and prints the worst difference under `what`.
inline void ExpectLossesContinue(const std::vector<double>& want,
                                 const std::vector<double>& losses, int64_t first_step,
                                 const std::string& what, double rel_tol = 1e-5) {
  ASSERT_FALSE(losses.empty()) << what;
  ASSERT_LE(first_step - 1 + static_cast<int64_t>(losses.size()),
            static_cast<int64_t>(want.size()))
      << what;
  double worst = 0.0;
  for (size_t i = 0; i < losses.size(); ++i) {
    const auto step = static_cast<size_t>(first_step) + i;
    const double rel = std::abs(losses[i] - want[step - 1]) / std::abs(want[step - 1]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, rel_tol) << what << ": step " << step << " loss " << losses[i]
                            << " vs uninterrupted " << want[step - 1];
  }
  std::printf("%s: steps %lld-%lld, worst relative difference %.3g\n", what.c_str(),
              static_cast<long long>(first_step),
              static_cast<long long>(first_step - 1 + static_cast<int64_t>(losses.size())), worst);
}

}  // namespace motley::testing
