// EmulatedBackend: a device of an emulated cluster (docs/architecture.md §6). Every op runs on a
// real CpuBackend, so the numbers are exactly the CPU's, and is then charged on the rank's
// VirtualClock the time the device type's emulated profile implies:
//   dt = max(flops / (flops_per_s * rate), bytes / (memory_bandwidth * rate))
// with FLOPs and bytes from the one cost table (op_costs.h). On a kVirtual clock nothing sleeps;
// on a kWall clock VirtualClock::Advance sleeps to the absolute deadline, carrying overshoot
// forward. `rate` (default 1) is the straggler hook: SetRate(r) from now on, or a schedule of
// (step, rate) applied by BeginStep(step).
//
// Memory capacity: every tensor this backend creates is counted against DeviceType::memory_bytes
// until its last handle is released. The Backend interface's Empty/Zeros cannot fail, so an
// allocation that goes past the capacity still returns real (host) memory -- the numbers are real,
// so the host must hold them anyway -- and puts the backend into a sticky out-of-memory state:
// memory_status() then returns an error naming the device and the bytes, which the runtime checks
// after building a stage and after each step. Callers that want the error at the allocation use
// TryEmpty/TryZeros (additive to the interface), which allocate nothing when it would not fit.
//
// Ownership: owns its CpuBackend; the clock is borrowed and must outlive the backend. Tensors share
// ownership of their memory with the caller and may outlive the backend (the byte count lives in a
// shared account). Thread safety: like every Backend, one rank thread drives it; releasing tensors
// from other threads is safe (the account is atomic).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/emulated/op_costs.h"
#include "core/clock.h"
#include "core/status.h"
#include "spec/cluster_spec.h"
#include "tensor/backend.h"

namespace motley::backend {

// One entry of a straggler schedule: from optimizer step `step` on, the device runs at `rate`
// times its profile (0.5 = half speed).
struct RateChange {
  int64_t step = 0;
  double rate = 1.0;
};

// Ops as charged, for statistics.
enum class EmulatedOp : uint8_t {
  kMemory,
  kMatmulForward,
  kMatmulBackward,
  kEmbeddingForward,
  kEmbeddingBackward,
  kRmsNormForward,
  kRmsNormBackward,
  kRopeForward,
  kRopeBackward,
  kAttentionForward,
  kAttentionBackward,
  kSwiGluForward,
  kSwiGluBackward,
  kCrossEntropyForward,
  kCrossEntropyBackward,
  kElementwise,
  kAdamW,
  kCount
};
const char* EmulatedOpName(EmulatedOp op);

struct EmulatedOpStats {
  int64_t calls = 0;
  Flops flops = 0.0;
  Bytes bytes = 0.0;
  Seconds time = 0.0;  // charged on the clock
};

class EmulatedBackend final : public tensor::Backend {
 public:
  // `type` must carry an emulated profile with positive flop/s and bandwidth and a positive
  // memory_bytes; errors name the device type and the field. `clock` is not owned.
  static Result<std::unique_ptr<EmulatedBackend>> Create(const spec::DeviceType& type,
                                                         VirtualClock* clock, int index = 0,
                                                         int num_threads = 1);

  // --- emulation controls ---------------------------------------------------------------------
  double rate() const { return rate_; }
  void SetRate(double rate);  // rate > 0 (checked)
  // Replaces the schedule; entries need not be sorted. BeginStep(step) sets the rate of the last
  // entry with entry.step <= step (1 when none); SetRate afterwards overrides until the next
  // BeginStep.
  void SetRateSchedule(std::vector<RateChange> schedule);
  void BeginStep(int64_t step);

  // Seconds an op of this cost takes at the current rate (what Charge adds to the clock).
  Seconds CostSeconds(const costs::OpCost& cost) const;
  VirtualClock& clock() { return *clock_; }
  const spec::DeviceType& device_type() const { return type_; }

  // --- memory accounting ----------------------------------------------------------------------
  int64_t capacity_bytes() const { return capacity_; }
  int64_t live_bytes() const;
  int64_t peak_bytes() const;
  // Ok, or the first out-of-memory error (sticky).
  Status memory_status() const override { return oom_; }
  // Like Empty/Zeros, but an allocation past the capacity returns the error and allocates nothing.
  Result<tensor::Tensor> TryEmpty(tensor::Shape shape, tensor::DType dtype);
  Result<tensor::Tensor> TryZeros(tensor::Shape shape, tensor::DType dtype);

  const EmulatedOpStats& stats(EmulatedOp op) const { return stats_[static_cast<size_t>(op)]; }
  EmulatedOpStats total_stats() const;

  // --- tensor::Backend -----------------------------------------------------------------------
  tensor::Device device() const override;
  std::string name() const override;
  tensor::Tensor Empty(tensor::Shape shape, tensor::DType dtype) override;
  tensor::Tensor Zeros(tensor::Shape shape, tensor::DType dtype) override;
  void SetZero(tensor::Tensor& t) override;
  void Fill(tensor::Tensor& t, float value) override;
  void CopyFromHost(tensor::Tensor& dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const tensor::Tensor& src, size_t bytes) override;
  void Copy(tensor::Tensor& dst, const tensor::Tensor& src) override;
  // out (N, OC) = inp (N, C) @ weight (OC, C)^T
  void MatmulForward(tensor::Tensor& out, const tensor::Tensor& inp,
                     const tensor::Tensor& weight) override;
  // dinp (N, C) +=, dweight (OC, C) += (either may be undefined)
  void MatmulBackward(tensor::Tensor& dinp, tensor::Tensor& dweight, const tensor::Tensor& dout,
                      const tensor::Tensor& inp, const tensor::Tensor& weight) override;
  // out (N, C) = wte (V, C) [tokens (N)]
  void EmbeddingForward(tensor::Tensor& out, const tensor::Tensor& tokens,
                        const tensor::Tensor& wte) override;
  // dwte (V, C) += scatter of dout (N, C)
  void EmbeddingBackward(tensor::Tensor& dwte, const tensor::Tensor& dout,
                         const tensor::Tensor& tokens) override;
  // out (N, C), rstd (N), inp (N, C), weight (C)
  void RmsNormForward(tensor::Tensor& out, tensor::Tensor& rstd, const tensor::Tensor& inp,
                      const tensor::Tensor& weight, float eps) override;
  void RmsNormBackward(tensor::Tensor& dinp, tensor::Tensor& dweight, const tensor::Tensor& dout,
                       const tensor::Tensor& inp, const tensor::Tensor& weight,
                       const tensor::Tensor& rstd) override;
  // (B, T, H, HS)
  void RopeForward(tensor::Tensor& out, const tensor::Tensor& inp, int64_t pos_offset,
                   float theta) override;
  void RopeBackward(tensor::Tensor& dinp, const tensor::Tensor& dout, int64_t pos_offset,
                    float theta) override;
  // q (B, T, NH, HS), k and v (B, T, NKV, HS), out (B, T, NH, HS), att (B, NH, T, T)
  void AttentionForward(tensor::Tensor& out, tensor::Tensor& att, const tensor::Tensor& q,
                        const tensor::Tensor& k, const tensor::Tensor& v) override;
  void AttentionBackward(tensor::Tensor& dq, tensor::Tensor& dk, tensor::Tensor& dv,
                         const tensor::Tensor& dout, const tensor::Tensor& q,
                         const tensor::Tensor& k, const tensor::Tensor& v,
                         const tensor::Tensor& att) override;
  // (N, F)
  void SwiGluForward(tensor::Tensor& out, const tensor::Tensor& gate,
                     const tensor::Tensor& up) override;
  void SwiGluBackward(tensor::Tensor& dgate, tensor::Tensor& dup, const tensor::Tensor& dout,
                      const tensor::Tensor& gate, const tensor::Tensor& up) override;
  // logits (N, V), targets and losses (N)
  void CrossEntropyForward(tensor::Tensor& losses, const tensor::Tensor& logits,
                           const tensor::Tensor& targets) override;
  void CrossEntropyBackward(tensor::Tensor& dlogits, const tensor::Tensor& logits,
                            const tensor::Tensor& targets, float loss_scale) override;
  void Add(tensor::Tensor& out, const tensor::Tensor& a, const tensor::Tensor& b) override;
  void AddInPlace(tensor::Tensor& a, const tensor::Tensor& b) override;
  void Scale(tensor::Tensor& a, float s) override;
  double SumSquares(const tensor::Tensor& a) override;
  double Sum(const tensor::Tensor& a) override;
  void AdamW(tensor::Tensor& param, const tensor::Tensor& grad, tensor::Tensor& m,
             tensor::Tensor& v, const tensor::AdamWParams& p) override;

  // Bytes of live tensors; shared with the deleters of the tensors this backend created.
  struct MemoryAccount {
    std::atomic<int64_t> live{0};
    std::atomic<int64_t> peak{0};
  };

 private:
  EmulatedBackend(const spec::DeviceType& type, VirtualClock* clock, int index, int num_threads);
  void Charge(EmulatedOp op, const costs::OpCost& cost);
  // Allocates host memory tagged with this device and counted in the account.
  tensor::Tensor Allocate(tensor::Shape shape, tensor::DType dtype);
  Status OutOfMemory(int64_t request) const;

  spec::DeviceType type_;
  VirtualClock* clock_;
  int index_;
  CpuBackend cpu_;
  int64_t capacity_;
  std::shared_ptr<MemoryAccount> account_;
  Status oom_;
  double rate_ = 1.0;
  std::vector<RateChange> schedule_;
  std::array<EmulatedOpStats, static_cast<size_t>(EmulatedOp::kCount)> stats_{};
};

}  // namespace motley::backend
