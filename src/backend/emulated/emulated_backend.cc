// See emulated_backend.h: delegate to the CPU, then charge the op on the clock.
#include "backend/emulated/emulated_backend.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include <fmt/core.h>

namespace motley::backend {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

namespace {

constexpr size_t kAlign = 64;  // data alignment, as the CPU backend's

// Lives in the first kAlign bytes of every block this backend allocates, so the plain-function
// deleter of tensor::Storage can find the account to credit.
struct BlockHeader {
  std::shared_ptr<EmulatedBackend::MemoryAccount> account;
  int64_t bytes = 0;
};
static_assert(sizeof(BlockHeader) <= kAlign);

void FreeBlock(void* data) {
  auto* base = static_cast<unsigned char*>(data) - kAlign;
  auto* header = std::launder(reinterpret_cast<BlockHeader*>(base));
  header->account->live.fetch_sub(header->bytes);
  header->~BlockHeader();
  std::free(base);
}

std::string FormatBytes(int64_t bytes) {
  return fmt::format("{} bytes ({:.2f} MiB)", bytes,
                     static_cast<double>(bytes) / (1024.0 * 1024.0));
}

int64_t BytesOf(const Shape& shape, DType dtype) {
  return shape.numel() * static_cast<int64_t>(tensor::DTypeSize(dtype));
}

}  // namespace

const char* EmulatedOpName(EmulatedOp op) {
  static constexpr const char* kNames[] = {"memory",
                                           "matmul_forward",
                                           "matmul_backward",
                                           "embedding_forward",
                                           "embedding_backward",
                                           "rmsnorm_forward",
                                           "rmsnorm_backward",
                                           "rope_forward",
                                           "rope_backward",
                                           "attention_forward",
                                           "attention_backward",
                                           "swiglu_forward",
                                           "swiglu_backward",
                                           "cross_entropy_forward",
                                           "cross_entropy_backward",
                                           "elementwise",
                                           "adamw"};
  static_assert(std::size(kNames) == static_cast<size_t>(EmulatedOp::kCount));
  return kNames[static_cast<size_t>(op)];
}

Result<std::unique_ptr<EmulatedBackend>> EmulatedBackend::Create(const spec::DeviceType& type,
                                                                 VirtualClock* clock, int index,
                                                                 int num_threads) {
  MOTLEY_CHECK(clock != nullptr, "EmulatedBackend needs a clock");
  if (!type.emulated) {
    return Err("device type '{}': emulated: missing; the emulated backend needs a profile",
               type.name);
  }
  if (!(type.emulated->flops_per_s > 0.0)) {
    return Err("device type '{}': emulated.flops_per_s: must be positive, got {}", type.name,
               type.emulated->flops_per_s);
  }
  if (!(type.emulated->memory_bandwidth > 0.0)) {
    return Err("device type '{}': emulated.memory_bandwidth: must be positive, got {}", type.name,
               type.emulated->memory_bandwidth);
  }
  if (!(type.memory_bytes > 0.0)) {
    return Err("device type '{}': memory: must be positive to emulate its capacity, got {}",
               type.name, type.memory_bytes);
  }
  if (index < 0 || num_threads < 1) {
    return Err("device type '{}': index {} must be >= 0 and threads {} >= 1", type.name, index,
               num_threads);
  }
  return std::unique_ptr<EmulatedBackend>(new EmulatedBackend(type, clock, index, num_threads));
}

EmulatedBackend::EmulatedBackend(const spec::DeviceType& type, VirtualClock* clock, int index,
                                 int num_threads)
    : type_(type),
      clock_(clock),
      index_(index),
      cpu_(num_threads, index),
      capacity_(static_cast<int64_t>(type.memory_bytes)),
      account_(std::make_shared<MemoryAccount>()) {}

void EmulatedBackend::SetRate(double rate) {
  MOTLEY_CHECK(rate > 0.0, "EmulatedBackend::SetRate needs a positive rate");
  rate_ = rate;
}

void EmulatedBackend::SetRateSchedule(std::vector<RateChange> schedule) {
  for (const RateChange& c : schedule) MOTLEY_CHECK(c.rate > 0.0, "rate schedule: rate <= 0");
  std::stable_sort(schedule.begin(), schedule.end(),
                   [](const RateChange& a, const RateChange& b) { return a.step < b.step; });
  schedule_ = std::move(schedule);
}

void EmulatedBackend::BeginStep(int64_t step) {
  double rate = 1.0;
  for (const RateChange& c : schedule_) {
    if (c.step <= step) rate = c.rate;
  }
  rate_ = rate;
}

Seconds EmulatedBackend::CostSeconds(const costs::OpCost& cost) const {
  const Seconds compute = cost.flops / (type_.emulated->flops_per_s * rate_);
  const Seconds memory = cost.bytes / (type_.emulated->memory_bandwidth * rate_);
  return std::max(compute, memory);
}

void EmulatedBackend::Charge(EmulatedOp op, const costs::OpCost& cost) {
  const Seconds dt = CostSeconds(cost);
  EmulatedOpStats& s = stats_[static_cast<size_t>(op)];
  ++s.calls;
  s.flops += cost.flops;
  s.bytes += cost.bytes;
  s.time += dt;
  clock_->Advance(dt);
}

EmulatedOpStats EmulatedBackend::total_stats() const {
  EmulatedOpStats t;
  for (const EmulatedOpStats& s : stats_) {
    t.calls += s.calls;
    t.flops += s.flops;
    t.bytes += s.bytes;
    t.time += s.time;
  }
  return t;
}

// --- memory -----------------------------------------------------------------------------------

int64_t EmulatedBackend::live_bytes() const {
  return account_->live.load();
}

int64_t EmulatedBackend::peak_bytes() const {
  return account_->peak.load();
}

Status EmulatedBackend::OutOfMemory(int64_t request) const {
  return Err(
      "emulated device {} (type '{}'): out of memory: allocating {} with {} in use exceeds the "
      "capacity of {}",
      tensor::DeviceName(device()), type_.name, FormatBytes(request), FormatBytes(live_bytes()),
      FormatBytes(capacity_));
}

Tensor EmulatedBackend::Allocate(Shape shape, DType dtype) {
  const int64_t bytes = BytesOf(shape, dtype);
  const size_t rounded = (static_cast<size_t>(bytes) + kAlign - 1) / kAlign * kAlign;
  void* base = std::aligned_alloc(kAlign, kAlign + rounded);
  MOTLEY_CHECK(base != nullptr, "EmulatedBackend: host allocation failed");
  new (base) BlockHeader{account_, bytes};
  const int64_t live = account_->live.fetch_add(bytes) + bytes;
  int64_t peak = account_->peak.load();
  while (live > peak && !account_->peak.compare_exchange_weak(peak, live)) {
  }
  auto storage = std::make_shared<tensor::Storage>();
  storage->data = static_cast<unsigned char*>(base) + kAlign;
  storage->bytes = static_cast<size_t>(bytes);
  storage->device = device();
  storage->deleter = &FreeBlock;
  return Tensor(std::move(storage), shape, dtype);
}

Result<Tensor> EmulatedBackend::TryEmpty(Shape shape, DType dtype) {
  const int64_t bytes = BytesOf(shape, dtype);
  if (live_bytes() + bytes > capacity_) return OutOfMemory(bytes);
  return Allocate(shape, dtype);
}

Result<Tensor> EmulatedBackend::TryZeros(Shape shape, DType dtype) {
  MOTLEY_ASSIGN_OR_RETURN(Tensor t, TryEmpty(shape, dtype));
  SetZero(t);
  return t;
}

Tensor EmulatedBackend::Empty(Shape shape, DType dtype) {
  const int64_t bytes = BytesOf(shape, dtype);
  if (live_bytes() + bytes > capacity_ && oom_.ok()) oom_ = OutOfMemory(bytes);
  return Allocate(shape, dtype);
}

Tensor EmulatedBackend::Zeros(Shape shape, DType dtype) {
  Tensor t = Empty(shape, dtype);
  SetZero(t);
  return t;
}

tensor::Device EmulatedBackend::device() const {
  return tensor::Device{tensor::DeviceKind::kEmulated, index_};
}

std::string EmulatedBackend::name() const {
  return fmt::format("emulated:{} ({}, rate {})", index_, type_.name, rate_);
}

void EmulatedBackend::SetZero(Tensor& t) {
  cpu_.SetZero(t);
  Charge(EmulatedOp::kMemory, costs::WriteBytes(static_cast<double>(t.bytes())));
}

void EmulatedBackend::Fill(Tensor& t, float value) {
  cpu_.Fill(t, value);
  Charge(EmulatedOp::kMemory, costs::WriteBytes(static_cast<double>(t.bytes())));
}

void EmulatedBackend::CopyFromHost(Tensor& dst, const void* src, size_t bytes) {
  cpu_.CopyFromHost(dst, src, bytes);
  Charge(EmulatedOp::kMemory, costs::WriteBytes(static_cast<double>(bytes)));
}

void EmulatedBackend::CopyToHost(void* dst, const Tensor& src, size_t bytes) {
  cpu_.CopyToHost(dst, src, bytes);
  Charge(EmulatedOp::kMemory, costs::ReadBytes(static_cast<double>(bytes)));
}

void EmulatedBackend::Copy(Tensor& dst, const Tensor& src) {
  cpu_.Copy(dst, src);
  Charge(EmulatedOp::kMemory, costs::CopyBytes(static_cast<double>(src.bytes())));
}

// --- compute ----------------------------------------------------------------------------------

void EmulatedBackend::MatmulForward(Tensor& out, const Tensor& inp, const Tensor& weight) {
  cpu_.MatmulForward(out, inp, weight);
  const int64_t c = weight.dim(1);
  Charge(EmulatedOp::kMatmulForward, costs::MatmulForward(inp.numel() / c, c, weight.dim(0)));
}

void EmulatedBackend::MatmulBackward(Tensor& dinp, Tensor& dweight, const Tensor& dout,
                                     const Tensor& inp, const Tensor& weight) {
  cpu_.MatmulBackward(dinp, dweight, dout, inp, weight);
  const int64_t c = weight.dim(1);
  const int64_t n = inp.numel() / c;
  const int64_t oc = weight.dim(0);
  costs::OpCost cost;
  if (dinp.defined()) cost += costs::MatmulBackwardInput(n, c, oc);
  if (dweight.defined()) cost += costs::MatmulBackwardWeight(n, c, oc);
  Charge(EmulatedOp::kMatmulBackward, cost);
}

void EmulatedBackend::EmbeddingForward(Tensor& out, const Tensor& tokens, const Tensor& wte) {
  cpu_.EmbeddingForward(out, tokens, wte);
  Charge(EmulatedOp::kEmbeddingForward, costs::EmbeddingForward(tokens.numel(), wte.dim(1)));
}

void EmulatedBackend::EmbeddingBackward(Tensor& dwte, const Tensor& dout, const Tensor& tokens) {
  cpu_.EmbeddingBackward(dwte, dout, tokens);
  Charge(EmulatedOp::kEmbeddingBackward, costs::EmbeddingBackward(tokens.numel(), dwte.dim(1)));
}

void EmulatedBackend::RmsNormForward(Tensor& out, Tensor& rstd, const Tensor& inp,
                                     const Tensor& weight, float eps) {
  cpu_.RmsNormForward(out, rstd, inp, weight, eps);
  const int64_t c = weight.numel();
  Charge(EmulatedOp::kRmsNormForward, costs::RmsNormForward(inp.numel() / c, c));
}

void EmulatedBackend::RmsNormBackward(Tensor& dinp, Tensor& dweight, const Tensor& dout,
                                      const Tensor& inp, const Tensor& weight, const Tensor& rstd) {
  cpu_.RmsNormBackward(dinp, dweight, dout, inp, weight, rstd);
  const int64_t c = weight.numel();
  Charge(EmulatedOp::kRmsNormBackward, costs::RmsNormBackward(inp.numel() / c, c));
}

void EmulatedBackend::RopeForward(Tensor& out, const Tensor& inp, int64_t pos_offset, float theta) {
  cpu_.RopeForward(out, inp, pos_offset, theta);
  Charge(EmulatedOp::kRopeForward, costs::RopeForward(inp.numel()));
}

void EmulatedBackend::RopeBackward(Tensor& dinp, const Tensor& dout, int64_t pos_offset,
                                   float theta) {
  cpu_.RopeBackward(dinp, dout, pos_offset, theta);
  Charge(EmulatedOp::kRopeBackward, costs::RopeBackward(dout.numel()));
}

void EmulatedBackend::AttentionForward(Tensor& out, Tensor& att, const Tensor& q, const Tensor& k,
                                       const Tensor& v) {
  cpu_.AttentionForward(out, att, q, k, v);
  Charge(EmulatedOp::kAttentionForward,
         costs::AttentionForward(q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)));
}

void EmulatedBackend::AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                        const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& att) {
  cpu_.AttentionBackward(dq, dk, dv, dout, q, k, v, att);
  Charge(EmulatedOp::kAttentionBackward,
         costs::AttentionBackward(q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)));
}

void EmulatedBackend::SwiGluForward(Tensor& out, const Tensor& gate, const Tensor& up) {
  cpu_.SwiGluForward(out, gate, up);
  Charge(EmulatedOp::kSwiGluForward, costs::SwiGluForward(gate.numel()));
}

void EmulatedBackend::SwiGluBackward(Tensor& dgate, Tensor& dup, const Tensor& dout,
                                     const Tensor& gate, const Tensor& up) {
  cpu_.SwiGluBackward(dgate, dup, dout, gate, up);
  Charge(EmulatedOp::kSwiGluBackward, costs::SwiGluBackward(gate.numel()));
}

void EmulatedBackend::CrossEntropyForward(Tensor& losses, const Tensor& logits,
                                          const Tensor& targets) {
  cpu_.CrossEntropyForward(losses, logits, targets);
  Charge(EmulatedOp::kCrossEntropyForward,
         costs::CrossEntropyForward(logits.dim(0), logits.dim(1)));
}

void EmulatedBackend::CrossEntropyBackward(Tensor& dlogits, const Tensor& logits,
                                           const Tensor& targets, float loss_scale) {
  cpu_.CrossEntropyBackward(dlogits, logits, targets, loss_scale);
  Charge(EmulatedOp::kCrossEntropyBackward,
         costs::CrossEntropyBackward(logits.dim(0), logits.dim(1)));
}

void EmulatedBackend::Add(Tensor& out, const Tensor& a, const Tensor& b) {
  cpu_.Add(out, a, b);
  Charge(EmulatedOp::kElementwise, costs::Add(a.numel()));
}

void EmulatedBackend::AddInPlace(Tensor& a, const Tensor& b) {
  cpu_.AddInPlace(a, b);
  Charge(EmulatedOp::kElementwise, costs::AddInPlace(a.numel()));
}

void EmulatedBackend::Scale(Tensor& a, float s) {
  cpu_.Scale(a, s);
  Charge(EmulatedOp::kElementwise, costs::Scale(a.numel()));
}

double EmulatedBackend::SumSquares(const Tensor& a) {
  const double r = cpu_.SumSquares(a);
  Charge(EmulatedOp::kElementwise, costs::SumSquares(a.numel()));
  return r;
}

double EmulatedBackend::Sum(const Tensor& a) {
  const double r = cpu_.Sum(a);
  Charge(EmulatedOp::kElementwise, costs::Sum(a.numel()));
  return r;
}

void EmulatedBackend::AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                            const tensor::AdamWParams& p) {
  cpu_.AdamW(param, grad, m, v, p);
  Charge(EmulatedOp::kAdamW, costs::AdamW(param.numel()));
}

}  // namespace motley::backend
