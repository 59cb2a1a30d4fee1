// See profiler.h.
#include "train/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <thread>

#include <fmt/core.h>

#include "backend/cpu/cpu_backend.h"
#include "model/optimizer.h"
#include "model/stage.h"
#include "model/tp_group.h"

namespace motley::train {
namespace {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

constexpr int64_t kBlocksTimed = 4;  // blocks per timed stage (fewer when the model has fewer)

// Runs OpenBLAS with `threads` threads while it lives (the profile's per-rank thread count, as
// the runtime sets it: SetBlasThreads(1) for ranks that are threads or processes) and restores
// the process's previous count after. Without it the profiler's sgemms ran with OpenBLAS's
// default (every core: 2 here) while the runtime's ran with 1, and blocks profiled 12-16% faster
// than the runtime executed them (measured 2026-11-29, small model, b=2, T=128: block forward
// 1.61-1.66 ms vs 1.80-1.88 ms, backward 2.34-2.37 ms vs 2.71-2.74 ms).
class ScopedBlasThreads {
 public:
  explicit ScopedBlasThreads(int threads) : previous_(backend::BlasThreads()) {
    backend::SetBlasThreads(std::max(1, threads));
  }
  ~ScopedBlasThreads() { backend::SetBlasThreads(std::max(1, previous_)); }
  ScopedBlasThreads(const ScopedBlasThreads&) = delete;
  ScopedBlasThreads& operator=(const ScopedBlasThreads&) = delete;

 private:
  int previous_;
};

// One TP rank whose all-reduces do nothing: the shard's compute, without communication.
class NoCommTpGroup final : public model::TpGroup {
 public:
  explicit NoCommTpGroup(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void AllReduceSum(Tensor& /*data*/) override {}

 private:
  int size_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Timed samples of one part (forward and backward of one micro-batch each).
struct Samples {
  std::vector<double> forward;
  std::vector<double> backward;
  PartTimes Medians(double divide_by) const {
    return {Median(forward) / divide_by, Median(backward) / divide_by};
  }
};

// Runs `forward` then `backward` once; keeps their times when `keep`.
template <typename F, typename B>
void TimeOnce(bool keep, Samples& samples, F&& forward, B&& backward) {
  const auto t0 = Clock::now();
  forward();
  const auto t1 = Clock::now();
  backward();
  const auto t2 = Clock::now();
  if (!keep) return;
  samples.forward.push_back(Seconds(t0, t1));
  samples.backward.push_back(Seconds(t1, t2));
}

Tensor Filled(tensor::Backend& backend, Shape shape, float value) {
  Tensor t = backend.Empty(shape, DType::kF32);
  backend.Fill(t, value);
  return t;
}

Tensor Tokens(tensor::Backend& backend, int64_t b, int64_t t, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(b * t));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % static_cast<size_t>(vocab));
  Tensor out = backend.Empty(Shape{b, t}, DType::kI32);
  backend.CopyFromHost(out, ids.data(), ids.size() * sizeof(int32_t));
  return out;
}

// The parts of one micro-batch size, built on one backend.
struct Rig {
  int64_t b = 0;
  int64_t blocks = 0;  // blocks in the timed block stage
  std::unique_ptr<model::Stage> block_stage, embedding_stage, head_stage;
  Tensor act, grad, tokens;  // act, grad (b, T, C); tokens (b, T) int32
  Samples block, embedding, head;
};

Result<std::vector<Rig>> MakeRigs(tensor::Backend& backend, const spec::ModelSpec& model,
                                  const ProfileOptions& options, model::TpGroup* tp_group) {
  const int64_t t = options.seq_len;
  std::vector<Rig> rigs;
  for (const int64_t b : options.micro_batch_sizes) {
    auto make = [&](int64_t blocks, bool embedding, bool head) {
      model::StageLayout layout;
      layout.first_block = 0;
      layout.num_blocks = blocks;
      layout.has_embedding = embedding;
      layout.has_head = head;
      layout.tp_degree = blocks > 0 ? options.tp : 1;
      return model::Stage::Create(backend, model, layout, b, t, options.seed,
                                  blocks > 0 ? tp_group : nullptr);
    };
    Rig rig;
    rig.b = b;
    // Several blocks back to back, as a stage runs them (their weights and activations cycle
    // through the caches as in training), divided by their count.
    rig.blocks = std::min<int64_t>(model.num_blocks, kBlocksTimed);
    MOTLEY_ASSIGN_OR_RETURN(rig.block_stage, make(rig.blocks, false, false));
    MOTLEY_ASSIGN_OR_RETURN(rig.embedding_stage, make(0, true, false));
    MOTLEY_ASSIGN_OR_RETURN(rig.head_stage, make(0, false, true));
    rig.act = Filled(backend, Shape{b, t, model.hidden}, 0.01F);
    rig.grad = Filled(backend, Shape{b, t, model.hidden}, 0.001F);
    rig.tokens = Tokens(backend, b, t, model.vocab_size);
    rigs.push_back(std::move(rig));
  }
  return rigs;
}

// One pass over one size: forward and backward of its parts in the runtime's order (embedding,
// blocks, head), timed into the rig when `keep`.
void RunPass(Rig& r, int64_t t, bool keep) {
  TimeOnce(keep, r.embedding, [&] { r.embedding_stage->Forward(0, r.tokens); },
           [&] { r.embedding_stage->Backward(0, r.grad); });
  TimeOnce(keep, r.block, [&] { r.block_stage->Forward(0, r.act); },
           [&] { r.block_stage->Backward(0, r.grad); });
  const float scale = 1.0F / static_cast<float>(r.b * t);
  TimeOnce(keep, r.head, [&] { r.head_stage->ForwardLoss(0, r.act, r.tokens); },
           [&] { r.head_stage->BackwardLoss(0, scale); });
}

// Each size on its own: warm-up passes, then the timed ones, in a row, as the runtime runs one
// size over and over (`current` names the size being timed, for the companions). Passes that
// alternated between sizes ran blocks 4-8% slower than that (colder caches; b=2, T=128: 1.86-1.94
// vs 1.74-1.80 ms forward, 2026-11-29), so the sizes are not interleaved.
void Measure(std::vector<Rig>& rigs, int64_t t, int warmup, int repeats,
             std::atomic<size_t>& current) {
  for (size_t k = 0; k < rigs.size(); ++k) {
    current.store(k);
    for (int i = 0; i < warmup + repeats; ++i) RunPass(rigs[k], t, i >= warmup);
  }
}

// Runs `measure()` on this thread while `companions` other threads each run `load(stop)`: the
// same work, untimed, on backends of their own, until `stop` is set. `setup` (Status()) runs first
// on each companion; the measurement starts once every companion has finished its setup, so its
// warm-up passes already run beside the load. Returns the measurement's result, or the first
// companion's setup error.
template <typename T, typename Setup, typename Load, typename Measure>
Result<T> WithCompanions(int companions, Setup&& setup, Load&& load, Measure&& measure) {
  std::atomic<bool> stop{false};
  std::latch ready(companions);
  std::vector<Status> status(static_cast<size_t>(companions));
  std::vector<std::thread> threads;
  for (int c = 0; c < companions; ++c) {
    threads.emplace_back([&, c] {
      auto state = setup();
      status[static_cast<size_t>(c)] = state.status();
      ready.count_down();
      if (state.ok()) load(*state, stop);
    });
  }
  ready.wait();
  Result<T> result = measure();
  stop.store(true);
  for (std::thread& th : threads) th.join();
  for (const Status& st : status) MOTLEY_RETURN_IF_ERROR(st);
  return result;
}

Status CheckOptions(const spec::ModelSpec& model, const ProfileOptions& options) {
  if (options.micro_batch_sizes.empty()) return Err("profile: no micro-batch sizes given");
  for (const int64_t b : options.micro_batch_sizes) {
    if (b <= 0) return Err("profile: micro-batch size must be positive, got {}", b);
  }
  if (options.seq_len <= 0) {
    return Err("profile: sequence length must be positive, got {}", options.seq_len);
  }
  if (options.warmup < 0 || options.repeats < 1) {
    return Err("profile: needs warmup >= 0 and repeats >= 1, got {} and {}", options.warmup,
               options.repeats);
  }
  if (options.companions < 0) {
    return Err("profile: companions must be >= 0, got {}", options.companions);
  }
  const int tp = options.tp;
  if (tp < 1 || model.num_heads % tp != 0 || model.num_kv_heads % tp != 0 ||
      model.ffn_hidden % tp != 0) {
    return Err("profile: --tp {} must divide num_heads {}, num_kv_heads {} and ffn_hidden {}", tp,
               model.num_heads, model.num_kv_heads, model.ffn_hidden);
  }
  return Status::Ok();
}

// One backend with the rigs built on it (a companion's whole state).
struct RigSet {
  std::unique_ptr<backend::CpuBackend> backend;
  std::unique_ptr<NoCommTpGroup> group;
  std::vector<Rig> rigs;
};

Result<RigSet> MakeRigSet(const spec::ModelSpec& model, const ProfileOptions& options, int index) {
  RigSet set;
  set.backend = std::make_unique<backend::CpuBackend>(std::max(1, options.threads), index);
  set.group = std::make_unique<NoCommTpGroup>(options.tp);
  MOTLEY_ASSIGN_OR_RETURN(set.rigs, MakeRigs(*set.backend, model, options,
                                             options.tp > 1 ? set.group.get() : nullptr));
  return set;
}

}  // namespace

Result<std::vector<ProfilePoint>> ProfileModel(const spec::ModelSpec& model,
                                               const ProfileOptions& options) {
  MOTLEY_RETURN_IF_ERROR(AsInputError(CheckOptions(model, options)));  // exit code 2
  const ScopedBlasThreads blas_threads(options.threads);
  const int64_t t = options.seq_len;
  const int tp = options.tp;
  auto setup = [&] { return MakeRigSet(model, options, 1); };
  std::atomic<size_t> current{0};  // the size being timed; the companions run the same one
  auto load = [&](RigSet& set, const std::atomic<bool>& stop) {
    while (!stop.load()) RunPass(set.rigs[current.load()], t, false);
  };
  auto measure = [&]() -> Result<std::vector<ProfilePoint>> {
    MOTLEY_ASSIGN_OR_RETURN(RigSet set, MakeRigSet(model, options, 0));
    Measure(set.rigs, t, options.warmup, options.repeats, current);
    std::vector<ProfilePoint> points;
    for (const Rig& r : set.rigs) {
      ProfilePoint point;
      point.tp = tp;
      point.micro_batch_size = r.b;
      point.seq_len = t;
      point.block = r.block.Medians(static_cast<double>(r.blocks));
      point.embedding = r.embedding.Medians(1.0);
      point.head = r.head.Medians(1.0);
      points.push_back(point);
    }
    return points;
  };
  MOTLEY_ASSIGN_OR_RETURN(
      std::vector<ProfilePoint> points,
      WithCompanions<std::vector<ProfilePoint>>(options.companions, setup, load, measure));
  for (const ProfilePoint& point : points) {
    if (options.progress) {
      options.progress(fmt::format(
          "b={} T={} tp={}: block fwd {:.3f} ms bwd {:.3f} ms | embedding {:.3f}/{:.3f} ms | "
          "head {:.3f}/{:.3f} ms",
          point.micro_batch_size, t, tp, 1e3 * point.block.forward_s,
          1e3 * point.block.backward_s, 1e3 * point.embedding.forward_s,
          1e3 * point.embedding.backward_s, 1e3 * point.head.forward_s,
          1e3 * point.head.backward_s));
    }
  }
  return points;
}

namespace {

// A whole-model stage and its optimizer (the per-step work's state).
struct StepRig {
  std::unique_ptr<backend::CpuBackend> backend;
  std::unique_ptr<model::Stage> stage;
  std::unique_ptr<model::Optimizer> optimizer;
};

Result<StepRig> MakeStepRig(const spec::ModelSpec& model, const ProfileOptions& options,
                            int index) {
  StepRig rig;
  rig.backend = std::make_unique<backend::CpuBackend>(std::max(1, options.threads), index);
  model::StageLayout layout;
  layout.num_blocks = model.num_blocks;
  layout.has_embedding = true;
  layout.has_head = true;
  MOTLEY_ASSIGN_OR_RETURN(rig.stage, model::Stage::Create(*rig.backend, model, layout, 1, 1,
                                                          options.seed, nullptr));
  spec::OptimizerSpec spec;
  rig.optimizer = std::make_unique<model::Optimizer>(*rig.backend, rig.stage->params(), spec, 1000);
  return rig;
}

void StepOnce(model::Optimizer& optimizer, int step) {
  optimizer.ZeroGrads();
  const double sq = optimizer.GradSquaredNorm();
  optimizer.Step(step, sq >= 0 ? 1.0F : 0.0F);
}

}  // namespace

Result<double> ProfileStepPerParam(const spec::ModelSpec& model, const ProfileOptions& options) {
  if (options.companions < 0) {
    return Err("profile: companions must be >= 0, got {}", options.companions);
  }
  const ScopedBlasThreads blas_threads(options.threads);
  auto setup = [&] { return MakeStepRig(model, options, 1); };
  auto load = [&](StepRig& rig, const std::atomic<bool>& stop) {
    for (int i = 1; !stop.load(); ++i) StepOnce(*rig.optimizer, i);
  };
  auto measure = [&]() -> Result<double> {
    MOTLEY_ASSIGN_OR_RETURN(StepRig rig, MakeStepRig(model, options, 0));
    double params = 0;
    for (const model::Parameter& p : rig.stage->params()) {
      params += static_cast<double>(p.value.numel());
    }
    std::vector<double> times;
    for (int i = 0; i < options.warmup + options.repeats; ++i) {
      const auto t0 = Clock::now();
      StepOnce(*rig.optimizer, i + 1);
      const auto t1 = Clock::now();
      if (i >= options.warmup) times.push_back(Seconds(t0, t1));
    }
    return Median(times) / params;
  };
  return WithCompanions<double>(options.companions, setup, load, measure);
}

}  // namespace motley::train
