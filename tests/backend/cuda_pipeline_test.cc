// A pipeline with a GPU stage and a CPU stage (issue 7): every rank a thread over the `local`
// communicator, the GPU rank's activations and gradients staged through host memory
// (train/staged_communicator.h). Label gpu: every case skips without a CUDA device (or in a build
// without CUDA), reported as SKIPPED.
// - fp32: per-step losses equal the serial CPU run's within 1e-4 relative (the issue's bound;
//   the CPU-only plans meet 1e-5, plan_invariance_test.cc), with the GPU stage first and last;
// - bf16 (matmul operands rounded to bf16, fp32 master weights): the loss after 200 steps is
//   within 2% of the fp32 serial run's, for the GPU+CPU pipeline and for the GPU alone.
// Each case prints its tokens/s (the pipeline's against the GPU alone; never asserted).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "parallel_test_util.h"
#include "train/parallel_trainer.h"
#if MOTLEY_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace motley::testing {
namespace {

// Device 0: one GPU (vendor cuda, H100-class datasheet figures, unused by the runtime but for
// MFU); device 1: one CPU worker.
constexpr const char* kGpuCpuYaml = R"(
name: gpu-plus-cpu
device_types:
  - {name: gpu, vendor: cuda, peak_flops: {fp32: 67 TFLOPS, bf16: 989 TFLOPS}, memory: 80 GiB,
     memory_bandwidth: 3.35 TB/s}
  - {name: cpu, vendor: cpu, peak_flops: 50 GFLOPS, memory: 1 GiB, memory_bandwidth: 10 GB/s}
link_classes:
  - {name: pcie, latency: 5 us, bandwidth: 25 GB/s}
nodes:
  - {name: g0, device_type: gpu, device_count: 1, nics: [pcie]}
  - {name: c0, device_type: cpu, device_count: 1, nics: [pcie]}
islands:
  - {name: host, nodes: [g0, c0], link: pcie}
)";

// Why a GPU case cannot run here, or empty.
std::string NoGpuReason() {
#if MOTLEY_HAVE_CUDA
  if (backend::CudaDeviceCount() == 0) return "no CUDA device visible (no GPU or no driver)";
  return "";
#else
  return "built without CUDA (nvcc or the CUDA toolkit not found)";
#endif
}

// Two stages of the tiny 4-block model, 3 micro-batches of 4: blocks 0-1 (+ embedding) on device
// `first`, blocks 2-3 (+ norm and head) on device `second`.
spec::Plan TwoStages(int first, int second, const std::string& name) {
  return MakePlan(
      {Pipeline({Stage(0, 2, true, false, {first}), Stage(2, 2, false, true, {second})}, 3, 4)},
      name);
}

// The whole tiny model on the GPU alone (device 0).
spec::Plan GpuOnly(const std::string& name) {
  return MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 3, 4)}, name);
}

// Per-step losses of `plan`; prints its tokens/s (information only, never asserted).
std::vector<double> PipelineLosses(int64_t steps, const spec::Plan& plan, bool bf16) {
  train::ParallelTrainerOptions o;
  o.out = nullptr;
  o.cuda_bf16 = bf16;
  auto summary = train::TrainParallel(TinyRunOn(kGpuCpuYaml, steps), plan, o);
  EXPECT_TRUE(summary.ok()) << summary.status().message();
  if (!summary.ok()) return {};
  EXPECT_TRUE(summary->skipped_steps.empty());
  std::printf("%s (%s): %lld steps, %.0f tokens/s\n", plan.source.c_str(), bf16 ? "bf16" : "fp32",
              static_cast<long long>(steps),
              static_cast<double>(summary->tokens) / summary->train_time_s);
  return summary->losses;
}

void ExpectSerialLosses(const spec::Plan& plan) {
  constexpr int64_t kSteps = 20;
  constexpr double kRelTol = 1e-4;
  const std::vector<double> serial = SerialLosses(TinyRun(kSteps));
  const std::vector<double> got = PipelineLosses(kSteps, plan, false);
  ASSERT_EQ(got.size(), serial.size());
  double worst = 0.0;
  for (size_t k = 0; k < serial.size(); ++k) {
    const double rel = std::abs(got[k] - serial[k]) / std::abs(serial[k]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kRelTol) << "step " << k + 1 << ": " << got[k] << " vs serial " << serial[k];
  }
  EXPECT_LT(got.back(), got.front() - 0.5) << "it trained";
  std::printf("%s: worst relative loss difference to serial CPU over %lld steps: %.3g\n",
              plan.source.c_str(), static_cast<long long>(kSteps), worst);
}

TEST(CudaPipelineTest, GpuFirstStageMatchesSerialCpuInFp32) {
  const std::string why = NoGpuReason();
  if (!why.empty()) GTEST_SKIP() << why;
  ExpectSerialLosses(TwoStages(0, 1, "gpu->cpu"));
}

TEST(CudaPipelineTest, GpuLastStageMatchesSerialCpuInFp32) {
  const std::string why = NoGpuReason();
  if (!why.empty()) GTEST_SKIP() << why;
  ExpectSerialLosses(TwoStages(1, 0, "cpu->gpu"));
}

TEST(CudaPipelineTest, Bf16LossAfter200StepsWithin2PercentOfFp32) {
  const std::string why = NoGpuReason();
  if (!why.empty()) GTEST_SKIP() << why;
  constexpr int64_t kSteps = 200;
  const std::vector<double> fp32 = SerialLosses(TinyRun(kSteps));
  const std::vector<double> bf16 = PipelineLosses(kSteps, TwoStages(0, 1, "gpu(bf16)->cpu"), true);
  ASSERT_EQ(fp32.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(bf16.size(), static_cast<size_t>(kSteps));
  const double rel = std::abs(bf16.back() - fp32.back()) / fp32.back();
  std::printf("loss after %lld steps: bf16 GPU+CPU pipeline %.5f, fp32 serial CPU %.5f (%.3g%%)\n",
              static_cast<long long>(kSteps), bf16.back(), fp32.back(), 100.0 * rel);
  EXPECT_LE(rel, 0.02);
  EXPECT_LT(bf16.back(), bf16.front() - 1.0) << "bf16 trained";
}

TEST(CudaPipelineTest, GpuAloneBf16LossAfter200StepsWithin2PercentOfFp32) {
  const std::string why = NoGpuReason();
  if (!why.empty()) GTEST_SKIP() << why;
  constexpr int64_t kSteps = 200;
  const std::vector<double> fp32 = SerialLosses(TinyRun(kSteps));
  const std::vector<double> gpu_fp32 = PipelineLosses(kSteps, GpuOnly("gpu alone"), false);
  const std::vector<double> bf16 = PipelineLosses(kSteps, GpuOnly("gpu alone"), true);
  ASSERT_EQ(fp32.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(gpu_fp32.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(bf16.size(), static_cast<size_t>(kSteps));
  // fp32 on the GPU alone follows the serial CPU run (1e-4 over 20 steps; after 200 steps of
  // AdamW the trajectories may drift apart by more, so compare the end loosely: 0.5%).
  EXPECT_LE(std::abs(gpu_fp32.back() - fp32.back()) / fp32.back(), 5e-3);
  const double rel = std::abs(bf16.back() - fp32.back()) / fp32.back();
  std::printf(
      "loss after %lld steps: bf16 GPU alone %.5f, fp32 GPU alone %.5f, fp32 serial CPU "
      "%.5f (bf16 %.3g%% off)\n",
      static_cast<long long>(kSteps), bf16.back(), gpu_fp32.back(), fp32.back(), 100.0 * rel);
  EXPECT_LE(rel, 0.02);
}

}  // namespace
}  // namespace motley::testing
