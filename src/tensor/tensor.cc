// See tensor.h.
#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>

#include <fmt/core.h>

namespace motley::tensor {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}

std::string DeviceName(const Device& device) {
  const char* kind = device.kind == DeviceKind::kCpu    ? "cpu"
                     : device.kind == DeviceKind::kCuda ? "cuda"
                                                        : "emulated";
  return fmt::format("{}:{}", kind, device.index);
}

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  MOTLEY_CHECK(dims.size() <= kMaxRank, "shape rank above kMaxRank");
  rank_ = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    MOTLEY_CHECK(dims[i] >= 0, "negative dimension");
    dims_[i] = dims[i];
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + ")";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i)
    if (a.dims_[i] != b.dims_[i]) return false;
  return true;
}

Storage::~Storage() {
  if (deleter && data) deleter(data);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype)
    : storage_(std::move(storage)), shape_(shape), dtype_(dtype) {
  MOTLEY_CHECK(storage_ != nullptr, "tensor without storage");
  MOTLEY_CHECK(bytes() <= storage_->bytes, "tensor larger than its storage");
}

Tensor Tensor::Reshaped(Shape shape) const {
  MOTLEY_CHECK(shape.numel() == numel(), "reshape changes the number of elements");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

namespace {
void FreeAligned(void* p) { std::free(p); }
}  // namespace

Tensor HostTensor(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * DTypeSize(dtype);
  const size_t rounded = (bytes + 63) / 64 * 64;
  auto storage = std::make_shared<Storage>();
  storage->data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  MOTLEY_CHECK(storage->data != nullptr, "host allocation failed");
  std::memset(storage->data, 0, rounded == 0 ? 64 : rounded);
  storage->bytes = bytes;
  storage->device = Device{DeviceKind::kCpu, 0};
  storage->deleter = &FreeAligned;
  return Tensor(std::move(storage), shape, dtype);
}

Tensor HostTensorFrom(Shape shape, const std::vector<float>& values) {
  MOTLEY_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "value count != numel");
  Tensor t = HostTensor(shape, DType::kF32);
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor HostTensorFrom(Shape shape, const std::vector<int32_t>& values) {
  MOTLEY_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "value count != numel");
  Tensor t = HostTensor(shape, DType::kI32);
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

}  // namespace motley::tensor
