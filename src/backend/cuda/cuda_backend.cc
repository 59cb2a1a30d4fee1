// CudaBackend: creation (device, stream, cuBLAS handle), device memory and copies. The ops are in
// cuda_ops.cc. Compiled by the host compiler (fmt does not build under nvcc; cuda_context.h).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include <fmt/core.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_context.h"
#include "core/units.h"

namespace motley::backend {

using tensor::Device;
using tensor::DeviceKind;
using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

const char* CudaPrecisionName(CudaPrecision p) {
  return p == CudaPrecision::kFp32 ? "fp32" : "bf16";
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendOptions& options) {
  const int count = CudaDeviceCount();
  if (count == 0) return Err("cuda backend: no CUDA device is visible (no driver or no GPU)");
  if (options.device < 0 || options.device >= count) {
    return Err("cuda backend: device {} out of range ({} visible)", options.device, count);
  }
  if (cudaSetDevice(options.device) != cudaSuccess) {
    return Err("cuda backend: cudaSetDevice({}) failed: {}", options.device,
               cudaGetErrorString(cudaGetLastError()));
  }
  std::unique_ptr<CudaBackend> be(new CudaBackend(options));
  cuda::Context& impl = *be->ctx_;
  impl.device = options.device;
  impl.bf16 = options.precision == CudaPrecision::kBf16;
  if (cudaStreamCreateWithFlags(&impl.stream, cudaStreamNonBlocking) != cudaSuccess) {
    return Err("cuda backend: stream creation failed on device {}: {}", options.device,
               cudaGetErrorString(cudaGetLastError()));
  }
  if (cublasCreate(&impl.blas) != CUBLAS_STATUS_SUCCESS) {
    impl.blas = nullptr;
    return Err("cuda backend: cublasCreate failed on device {}", options.device);
  }
  MOTLEY_CUBLAS_CHECK(cublasSetStream(impl.blas, impl.stream));
  // Default math with CUBLAS_COMPUTE_32F keeps at least fp32's mantissa (no TF32: fp32 results
  // agree with the CPU to fp32 rounding); bf16 operands use the tensor cores through their type.
  MOTLEY_CUBLAS_CHECK(cublasSetMathMode(impl.blas, CUBLAS_DEFAULT_MATH));
  return be;
}

CudaBackend::CudaBackend(const CudaBackendOptions& options)
    : options_(options), ctx_(std::make_unique<cuda::Context>()) {
  ctx_->device = options.device;
}

CudaBackend::~CudaBackend() = default;  // cuda::Context's destructor drains and frees

Device CudaBackend::device() const {
  return Device{DeviceKind::kCuda, options_.device};
}

std::string CudaBackend::name() const {
  cudaDeviceProp prop{};
  const bool known = cudaGetDeviceProperties(&prop, options_.device) == cudaSuccess;
  return fmt::format("cuda:{} ({}, {})", options_.device, known ? prop.name : "unknown",
                     CudaPrecisionName(options_.precision));
}

namespace {
void FreeDevice(void* p) {
  cudaFree(p);  // synchronises the device: no kernel can still use p
}
}  // namespace

Tensor CudaBackend::Empty(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * tensor::DTypeSize(dtype);
  auto storage = std::make_shared<tensor::Storage>();
  MOTLEY_CUDA_CHECK(cudaSetDevice(options_.device));
  // Out of memory: the tensor gets no memory (data nullptr), the backend records the failure and
  // every later op is a no-op until the caller checks memory_status().
  storage->data = ctx_->out_of_memory ? nullptr : ctx_->Malloc(bytes == 0 ? 256 : bytes);
  storage->bytes = bytes;
  storage->device = device();
  storage->deleter = &FreeDevice;
  return Tensor(std::move(storage), shape, dtype);
}

Status CudaBackend::memory_status() const {
  if (!ctx_->out_of_memory) return Status::Ok();
  return Err(
      StatusCode::kResourceExhausted,
      "{}: out of device memory: allocating {} bytes ({:.3g} GiB) failed with {} of {} bytes "
      "free ({:.3g} of {:.3g} GiB); use a smaller model or batch, more micro-batches, or a "
      "plan over more devices",
      name(), ctx_->failed_bytes, static_cast<double>(ctx_->failed_bytes) / kGiB, ctx_->free_bytes,
      ctx_->total_bytes, static_cast<double>(ctx_->free_bytes) / kGiB,
      static_cast<double>(ctx_->total_bytes) / kGiB);
}

Tensor CudaBackend::Zeros(Shape shape, DType dtype) {
  Tensor t = Empty(shape, dtype);
  SetZero(t);
  return t;
}

void CudaBackend::SetZero(Tensor& t) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  MOTLEY_CHECK(t.defined() && t.device().kind == DeviceKind::kCuda, "SetZero: not a cuda tensor");
  MOTLEY_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.bytes(), ctx_->stream));
}

void CudaBackend::CopyFromHost(Tensor& dst, const void* src, size_t bytes) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  MOTLEY_CHECK(dst.defined() && dst.device().kind == DeviceKind::kCuda,
               "CopyFromHost: destination is not a cuda tensor");
  MOTLEY_CHECK(bytes == dst.bytes(), "CopyFromHost: byte count differs from dst.bytes()");
  if (bytes == 0) return;
  MOTLEY_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src, bytes, cudaMemcpyHostToDevice, ctx_->stream));
  MOTLEY_CUDA_CHECK(cudaStreamSynchronize(ctx_->stream));  // the caller may reuse src at once
}

void CudaBackend::CopyToHost(void* dst, const Tensor& src, size_t bytes) {
  if (ctx_->out_of_memory) {  // see memory_status(): nothing to copy from
    std::memset(dst, 0, bytes);
    return;
  }
  MOTLEY_CHECK(src.defined() && src.device().kind == DeviceKind::kCuda,
               "CopyToHost: source is not a cuda tensor");
  MOTLEY_CHECK(bytes == src.bytes(), "CopyToHost: byte count differs from src.bytes()");
  if (bytes == 0) return;
  MOTLEY_CUDA_CHECK(cudaMemcpyAsync(dst, src.raw(), bytes, cudaMemcpyDeviceToHost, ctx_->stream));
  MOTLEY_CUDA_CHECK(cudaStreamSynchronize(ctx_->stream));
}

void CudaBackend::Copy(Tensor& dst, const Tensor& src) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  MOTLEY_CHECK(dst.defined() && src.defined(), "Copy: undefined tensor");
  MOTLEY_CHECK(dst.device().kind == DeviceKind::kCuda && src.device().kind == DeviceKind::kCuda,
               "Copy: both tensors must be cuda tensors");
  MOTLEY_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(),
               "Copy: shapes or dtypes differ");
  if (dst.raw() == src.raw() || src.bytes() == 0) return;
  MOTLEY_CUDA_CHECK(
      cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice, ctx_->stream));
}

void CudaBackend::Synchronize() {
  if (ctx_->out_of_memory) return;  // see memory_status()
  MOTLEY_CUDA_CHECK(cudaStreamSynchronize(ctx_->stream));
}

}  // namespace motley::backend
