// CpuBackend: construction, memory and copies. The ops live in one file per family (see the
// header).
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/core.h>

#include "backend/cpu/cpu_util.h"
#include "core/check.h"

namespace motley::backend {

using tensor::Device;
using tensor::DeviceKind;
using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

void SetBlasThreads(int n) {
  MOTLEY_CHECK(n >= 1, "SetBlasThreads needs n >= 1");
  openblas_set_num_threads(n);
}

int BlasThreads() {
  return openblas_get_num_threads();
}

CpuBackend::CpuBackend(int num_threads, int index) : num_threads_(num_threads), index_(index) {
  MOTLEY_CHECK(num_threads >= 1, "CpuBackend needs num_threads >= 1");
  MOTLEY_CHECK(index >= 0, "CpuBackend needs index >= 0");
}

Device CpuBackend::device() const {
  return Device{DeviceKind::kCpu, index_};
}

std::string CpuBackend::name() const {
  return fmt::format("cpu:{} ({} threads)", index_, num_threads_);
}

namespace {
void FreeAligned(void* p) {
  std::free(p);
}
}  // namespace

Tensor CpuBackend::Empty(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * tensor::DTypeSize(dtype);
  const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  auto storage = std::make_shared<tensor::Storage>();
  storage->data = std::aligned_alloc(64, rounded);
  MOTLEY_CHECK(storage->data != nullptr, "CpuBackend::Empty: host allocation failed");
  storage->bytes = bytes;
  storage->device = device();
  storage->deleter = &FreeAligned;
  return Tensor(std::move(storage), shape, dtype);
}

Tensor CpuBackend::Zeros(Shape shape, DType dtype) {
  Tensor t = Empty(shape, dtype);
  SetZero(t);
  return t;
}

void CpuBackend::SetZero(Tensor& t) {
  MOTLEY_CHECK(t.defined(), "SetZero on an undefined tensor");
  MOTLEY_CHECK(t.device().host_addressable(), "SetZero on device memory");
  auto* p = static_cast<unsigned char*>(t.raw());
  const auto n = static_cast<int64_t>(t.bytes());
  internal::ParallelChunks(num_threads_, n, [&](int64_t b, int64_t e) {
    std::memset(p + b, 0, static_cast<size_t>(e - b));
  });
}

void CpuBackend::Fill(Tensor& t, float value) {
  float* p = internal::F32(t, "Fill: t must be a defined f32 tensor");
  internal::ParallelChunks(num_threads_, t.numel(),
                           [&](int64_t b, int64_t e) { std::fill(p + b, p + e, value); });
}

void CpuBackend::CopyFromHost(Tensor& dst, const void* src, size_t bytes) {
  MOTLEY_CHECK(dst.defined() && dst.device().host_addressable(), "CopyFromHost: bad destination");
  MOTLEY_CHECK(bytes == dst.bytes(), "CopyFromHost: byte count differs from dst.bytes()");
  if (bytes > 0) std::memcpy(dst.raw(), src, bytes);
}

void CpuBackend::CopyToHost(void* dst, const Tensor& src, size_t bytes) {
  MOTLEY_CHECK(src.defined() && src.device().host_addressable(), "CopyToHost: bad source");
  MOTLEY_CHECK(bytes == src.bytes(), "CopyToHost: byte count differs from src.bytes()");
  if (bytes > 0) std::memcpy(dst, src.raw(), bytes);
}

void CpuBackend::Copy(Tensor& dst, const Tensor& src) {
  MOTLEY_CHECK(dst.defined() && src.defined(), "Copy: undefined tensor");
  MOTLEY_CHECK(dst.device().host_addressable() && src.device().host_addressable(),
               "Copy: device memory");
  MOTLEY_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(),
               "Copy: shapes or dtypes differ");
  if (dst.raw() == src.raw()) return;
  auto* d = static_cast<unsigned char*>(dst.raw());
  const auto* s = static_cast<const unsigned char*>(src.raw());
  internal::ParallelChunks(
      num_threads_, static_cast<int64_t>(src.bytes()),
      [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, static_cast<size_t>(e - b)); });
}

float* CpuBackend::Scratch(size_t floats) {
  if (scratch_.size() < floats) scratch_.resize(floats);
  return scratch_.data();
}

}  // namespace motley::backend
