// Training-step benchmark of the CUDA backend (issue 7): whole steps of the single-device model
// (model::Stage holding every block, the embedding and the head, plus clipping and AdamW) on one
// GPU, as train::Train runs them minus data sampling. Reports tokens/s, achieved TFLOP/s counting
// 6N + 12LCT FLOPs per token (src/spec/model_flops.h, the llm.c/PaLM convention), and MFU against
//  - the datasheet bf16 dense peak (--peak-tflops, default 989: H100/H200 SXM, NVIDIA H100
//    datasheet, bf16 tensor core without sparsity), and
//  - the bf16 cuBLAS GEMM rate measured in the same run (CudaBf16GemmTflops, 8192^3).
// Timed steps are steady-state: --warmup untimed steps run first. Output: one JSON object on
// stdout (and in --json FILE). A plain program, not Google Benchmark, so that it builds on a GPU
// machine without that library (scripts/gpu_check.sh). Exits 2 without a GPU, printing why.
//
// Run: motley_cuda_step_bench [--preset gpt2-124m] [--batch 16] [--seq 1024] [--steps 10]
//        [--warmup 2] [--precision bf16|fp32] [--peak-tflops 989] [--json FILE]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "backend/cuda/cuda_backend.h"
#include "model/optimizer.h"
#include "model/stage.h"
#include "spec/model_flops.h"
#include "spec/model_spec.h"

namespace motley {
namespace {

struct Args {
  std::string preset = "gpt2-124m";
  int64_t batch = 16;
  int64_t seq = 1024;
  int64_t steps = 10;
  int64_t warmup = 2;
  std::string precision = "bf16";
  double peak_tflops = 989.0;
  std::string json;
};

bool Parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--preset")
      a.preset = v;
    else if (k == "--batch")
      a.batch = std::atoll(v.c_str());
    else if (k == "--seq")
      a.seq = std::atoll(v.c_str());
    else if (k == "--steps")
      a.steps = std::atoll(v.c_str());
    else if (k == "--warmup")
      a.warmup = std::atoll(v.c_str());
    else if (k == "--precision")
      a.precision = v;
    else if (k == "--peak-tflops")
      a.peak_tflops = std::atof(v.c_str());
    else if (k == "--json")
      a.json = v;
    else
      return false;
  }
  return argc % 2 == 1 && a.batch > 0 && a.seq > 0 && a.steps > 0 && a.warmup >= 0 &&
         (a.precision == "bf16" || a.precision == "fp32");
}

void Emit(const Args& a, const std::string& json) {
  std::printf("%s\n", json.c_str());
  if (a.json.empty()) return;
  if (std::FILE* f = std::fopen(a.json.c_str(), "w")) {
    std::fprintf(f, "%s\n", json.c_str());
    std::fclose(f);
  }
}

int Run(const Args& a) {
  if (backend::CudaDeviceCount() == 0) {
    Emit(a, R"({"status": "skipped", "reason": "no CUDA device visible"})");
    return 2;
  }
  auto model_or = spec::ModelPreset(a.preset);
  if (!model_or.ok()) {
    std::fprintf(stderr, "%s\n", model_or.status().message().c_str());
    return 1;
  }
  const spec::ModelSpec model = *model_or;
  const double gemm_tflops = backend::CudaBf16GemmTflops(0);
  backend::CudaBackendOptions o;
  o.precision =
      a.precision == "bf16" ? backend::CudaPrecision::kBf16 : backend::CudaPrecision::kFp32;
  auto be_or = backend::CudaBackend::Create(o);
  if (!be_or.ok()) {
    std::fprintf(stderr, "%s\n", be_or.status().message().c_str());
    return 1;
  }
  backend::CudaBackend& be = **be_or;
  auto stage_or = model::Stage::Create(be, model, model::StageLayout::Full(model), a.batch, a.seq,
                                       /*seed=*/1);
  if (!stage_or.ok()) {
    std::fprintf(stderr, "%s\n", stage_or.status().message().c_str());
    return 1;
  }
  model::Stage& stage = **stage_or;
  spec::OptimizerSpec opt_spec;
  model::Optimizer optimizer(be, stage.params(), opt_spec, /*total_steps=*/1000000);
  // Random tokens (B, T) i32: the step's cost does not depend on the values.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(model.vocab_size - 1));
  std::vector<int32_t> host(static_cast<size_t>(a.batch * a.seq));
  for (int32_t& t : host) t = dist(rng);
  tensor::Tensor inputs = be.Empty({a.batch, a.seq}, tensor::DType::kI32);
  tensor::Tensor targets = be.Empty({a.batch, a.seq}, tensor::DType::kI32);
  be.CopyFromHost(inputs, host.data(), host.size() * sizeof(int32_t));
  be.CopyFromHost(targets, host.data(), host.size() * sizeof(int32_t));
  const float loss_scale = 1.0F / static_cast<float>(a.batch * a.seq);
  int64_t step = 0;
  double loss = 0.0;
  auto train_step = [&] {
    optimizer.ZeroGrads();
    loss = stage.ForwardLoss(0, inputs, targets) * static_cast<double>(loss_scale);
    stage.BackwardLoss(0, loss_scale);
    const double sq = optimizer.GradSquaredNorm();
    optimizer.Step(++step, model::ClipScale(sq, opt_spec.grad_clip));
    be.Synchronize();
  };
  for (int64_t i = 0; i < a.warmup; ++i) train_step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < a.steps; ++i) train_step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens_per_s = static_cast<double>(a.batch * a.seq * a.steps) / seconds;
  const double tflops = tokens_per_s * spec::ModelFlopsPerToken(model, a.seq) / 1e12;
  Emit(a, fmt::format(R"({{"status": "ok", "device": "{}", "preset": "{}", "precision": "{}", )"
                      R"("batch": {}, "seq": {}, "timed_steps": {}, "step_s": {:.6f}, )"
                      R"("tokens_per_s": {:.1f}, "achieved_tflops": {:.3f}, "peak_tflops": {}, )"
                      R"("mfu_vs_peak": {:.4f}, "bf16_gemm_tflops_measured": {:.3f}, )"
                      R"("mfu_vs_measured_gemm": {:.4f}, "last_loss": {:.5f}}})",
                      be.name(), a.preset, a.precision, a.batch, a.seq, a.steps,
                      seconds / static_cast<double>(a.steps), tokens_per_s, tflops, a.peak_tflops,
                      tflops / a.peak_tflops, gemm_tflops,
                      gemm_tflops > 0 ? tflops / gemm_tflops : 0.0, loss));
  return 0;
}

}  // namespace
}  // namespace motley

int main(int argc, char** argv) {
  motley::Args args;
  if (!motley::Parse(argc, argv, args)) {
    std::fprintf(stderr,
                 "usage: %s [--preset P] [--batch B] [--seq T] [--steps N] [--warmup W] "
                 "[--precision bf16|fp32] [--peak-tflops X] [--json FILE]\n",
                 argv[0]);
    return 1;
  }
  return motley::Run(args);
}
