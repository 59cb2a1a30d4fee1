// A plan that puts a stage on a device of vendor cuda where no CUDA device can be used (no GPU,
// or a build without CUDA) fails with an error naming the device, before any step; it never
// silently falls back to the CPU. Skips where a GPU is visible (cuda_pipeline_test.cc trains
// there instead).
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "parallel_test_util.h"
#include "train/parallel_trainer.h"
#if MOTLEY_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace motley::testing {
namespace {

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

TEST(CudaStageErrorTest, CudaDeviceWithoutGpuIsAnErrorNamingTheDevice) {
#if MOTLEY_HAVE_CUDA
  if (backend::CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is visible: the stage would train";
#endif
  const spec::Plan plan = MakePlan(
      {Pipeline({Stage(0, 2, true, false, {1}), Stage(2, 2, false, true, {0})}, 3, 4)}, "cpu->gpu");
  train::ParallelTrainerOptions o;
  o.out = nullptr;
  auto summary = train::TrainParallel(TinyRunOn(kGpuCpuYaml, 2), plan, o);
  ASSERT_FALSE(summary.ok());
  const std::string& m = summary.status().message();
  std::printf("error: %s\n", m.c_str());
  EXPECT_NE(m.find("device 0"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu"), std::string::npos) << m;
}

}  // namespace
}  // namespace motley::testing
