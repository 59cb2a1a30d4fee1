// Whole training steps of the single-device loop's model (model::Stage holding every block, the
// embedding and the head, plus AdamW), as train::Train runs them minus data sampling: forward and
// backward of one micro-batch, global-norm clipping and one AdamW update. Reported per preset and
// thread count (the benchmark argument; OpenBLAS's process-wide thread count is set to the same):
// tokens/s and achieved GFLOP/s counting 6N + 12LCT FLOPs per token (src/spec/model_flops.h), so
// the GFLOP/s can be divided by the SgemmPeak rows of the same run (same thread count) for the
// share of sgemm peak a whole step reaches. Timed steps are steady-state steps: one warm-up step
// runs before timing. Cases: `small` at B=8 T=128 (the default run of `motley train`) and
// `gpt2-124m` at B=4 T=64 (the reference point of the project's reference notes,
// performance-model.md).
//
// Activation recompute (second argument: 0 none, 1 selective, 2 full; model/block.h): the step
// time against `recompute:0` of the same preset and thread count is the cost of recompute. Each
// case also runs one step of the same stage on an emulated device (the same ops on the CPU,
// counted: backend/emulated) and reports the peak bytes of live tensors (`peak_MiB`) and the FLOPs
// the step charged (`GFLOP_step`), so the memory saved and the work added are measured beside the
// time.
//
// Run: build-*/bench/motley_train_step_bench [--benchmark_filter=...] [--benchmark_min_time=1]
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_runtime_env.h"
#include "backend/emulated/emulated_backend.h"
#include "model/optimizer.h"
#include "model/stage.h"
#include "spec/model_flops.h"
#include "spec/model_spec.h"

namespace motley {
namespace {

spec::Recompute RecomputeArg(int64_t arg) {
  return arg == 2   ? spec::Recompute::kFull
         : arg == 1 ? spec::Recompute::kSelective
                    : spec::Recompute::kNone;
}

struct StepCounts {
  double peak_bytes = 0;
  double flops = 0;
};

// Builds the stage on `backend` and returns a closure running one whole training step.
struct StepRig {
  std::unique_ptr<model::Stage> stage;
  std::unique_ptr<model::Optimizer> optimizer;
  tensor::Tensor inputs, targets;
};

StepRig MakeRig(tensor::Backend& backend, const spec::ModelSpec& model, int64_t batch,
                int64_t seq_len, spec::Recompute recompute) {
  model::StageLayout layout = model::StageLayout::Full(model);
  layout.recompute = recompute;
  StepRig rig;
  rig.stage = model::Stage::Create(backend, model, layout, batch, seq_len, /*seed=*/1).value();
  rig.optimizer = std::make_unique<model::Optimizer>(
      backend, rig.stage->params(), spec::OptimizerSpec{}, /*total_steps=*/1000000);
  // Random tokens (B, T) i32: the step's cost does not depend on the values.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(model.vocab_size - 1));
  std::vector<int32_t> host(static_cast<size_t>(batch * seq_len));
  for (int32_t& t : host) t = dist(rng);
  rig.inputs = backend.Empty({batch, seq_len}, tensor::DType::kI32);
  rig.targets = backend.Empty({batch, seq_len}, tensor::DType::kI32);
  backend.CopyFromHost(rig.inputs, host.data(), host.size() * sizeof(int32_t));
  backend.CopyFromHost(rig.targets, host.data(), host.size() * sizeof(int32_t));
  return rig;
}

void RunStep(tensor::Backend& backend, StepRig& rig, int64_t step, float loss_scale) {
  rig.optimizer->ZeroGrads();
  benchmark::DoNotOptimize(rig.stage->ForwardLoss(0, rig.inputs, rig.targets));
  rig.stage->BackwardLoss(0, loss_scale);
  const double sq = rig.optimizer->GradSquaredNorm();
  rig.optimizer->Step(step, model::ClipScale(sq, spec::OptimizerSpec{}.grad_clip));
  backend.Synchronize();
}

// One step on an emulated device of ample capacity: peak live bytes and charged FLOPs.
StepCounts EmulatedStep(const spec::ModelSpec& model, int64_t batch, int64_t seq_len,
                        spec::Recompute recompute) {
  spec::DeviceType type;
  type.name = "counter";
  type.vendor = "cpu";
  type.memory_bytes = 1e12;
  type.emulated = spec::EmulatedProfile{1e15, 1e15};
  VirtualClock clock;
  auto backend = backend::EmulatedBackend::Create(type, &clock).value();
  StepRig rig = MakeRig(*backend, model, batch, seq_len, recompute);
  const double before = backend->total_stats().flops;
  RunStep(*backend, rig, 1, 1.0F / static_cast<float>(batch * seq_len));
  return {static_cast<double>(backend->peak_bytes()), backend->total_stats().flops - before};
}

void TrainStep(benchmark::State& state, const std::string& preset, int64_t batch, int64_t seq_len) {
  const int threads = static_cast<int>(state.range(0));
  const spec::Recompute recompute = RecomputeArg(state.range(1));
  const spec::ModelSpec model = spec::ModelPreset(preset).value();
  backend::SetBlasThreads(1);
  const StepCounts counts = EmulatedStep(model, batch, seq_len, recompute);
  backend::SetBlasThreads(threads);
  backend::CpuBackend backend(threads);
  StepRig rig = MakeRig(backend, model, batch, seq_len, recompute);
  const float loss_scale = 1.0F / static_cast<float>(batch * seq_len);
  int64_t step = 0;
  auto train_step = [&] { RunStep(backend, rig, ++step, loss_scale); };
  // One untimed warm-up step: the first step touches the activation slots, logits and gradient
  // scratch for the first time (88k page faults at gpt2-124m, about 0.6 s), a one-off cost of
  // a run that the few timed iterations of a slow case would otherwise include.
  train_step();
  for (auto _ : state) train_step();
  const auto tokens = static_cast<double>(batch * seq_len);
  state.counters["tokens/s"] =
      benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(tokens * spec::ModelFlopsPerToken(model, seq_len) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_MiB"] = counts.peak_bytes / (1024.0 * 1024.0);
  state.counters["GFLOP_step"] = counts.flops * 1e-9;
}

// OpenBLAS sgemm on (M, K) x (K, N) at the benchmark's thread count: the peak a training step is
// compared with (args: threads, M, N, K).
void BM_SgemmPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int m = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2));
  const int k = static_cast<int>(state.range(3));
  backend::SetBlasThreads(threads);
  std::vector<float> a(static_cast<size_t>(m) * k, 0.5F);
  std::vector<float> b(static_cast<size_t>(k) * n, 0.25F);
  std::vector<float> c(static_cast<size_t>(m) * n, 0.0F);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0F, a.data(), k, b.data(), n,
                0.0F, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SgemmPeak)
    ->ArgNames({"threads", "M", "N", "K"})
    ->Args({1, 1024, 1024, 1024})
    ->Args({1, 768, 3072, 768})
    ->Args({2, 1024, 1024, 1024})
    ->Args({2, 768, 3072, 768})
    ->UseRealTime()
    ->MinTime(1.0);

void BM_TrainStepSmall(benchmark::State& state) {
  TrainStep(state, "small", 8, 128);
}
BENCHMARK(BM_TrainStepSmall)
    ->ArgNames({"threads", "recompute"})
    ->ArgsProduct({{1, 2}, {0, 1, 2}})
    ->UseRealTime()
    ->MinTime(1.0);

void BM_TrainStepGpt2(benchmark::State& state) {
  TrainStep(state, "gpt2-124m", 4, 64);
}
BENCHMARK(BM_TrainStepGpt2)
    ->ArgNames({"threads", "recompute"})
    ->ArgsProduct({{1, 2}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

}  // namespace
}  // namespace motley

int main(int argc, char** argv) {
  motley::backend::ConfigureCpuRuntime(argv);  // see backend/cpu/cpu_runtime_env.h
  benchmark::AddCustomContext("openblas_core", motley::backend::BlasCoreName());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
