// Shape, DType, Device and Tensor: the value types every runtime module passes around.
//
// A Tensor is a typed, shaped view of a Storage block owned by a Backend (shared ownership: copies
// of a Tensor alias the same memory). Tensors are always contiguous, row-major. Host-side access
// (data<T>()) is only valid for tensors whose device is host-addressable (cpu, emulated).
// Thread safety: a Tensor is thread-compatible; concurrent writes to one Storage need external sync.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"

namespace motley::tensor {

enum class DType : uint8_t { kF32, kF64, kBF16, kI32 };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);

// The kind of device a rank drives. kEmulated is a real backend (cpu) on an emulated clock.
enum class DeviceKind : uint8_t { kCpu, kCuda, kEmulated };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  bool host_addressable() const { return kind != DeviceKind::kCuda; }
  friend bool operator==(const Device&, const Device&) = default;
};

std::string DeviceName(const Device& device);  // "cpu:0", "cuda:1", ...

// Dimensions, outermost first. At most kMaxRank dims; a rank-0 shape is a scalar (numel 1).
class Shape {
 public:
  static constexpr int kMaxRank = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);
  int rank() const { return rank_; }
  int64_t operator[](int i) const {
    MOTLEY_CHECK(i >= 0 && i < rank_, "shape index out of range");
    return dims_[static_cast<size_t>(i)];
  }
  int64_t numel() const;
  std::vector<int64_t> dims() const { return {dims_, dims_ + rank_}; }
  std::string str() const;  // "(4, 64, 768)"
  friend bool operator==(const Shape& a, const Shape& b);

 private:
  int64_t dims_[kMaxRank] = {};
  int rank_ = 0;
};

// A block of device memory. Freed by `deleter` when the last Tensor referring to it goes away.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  void (*deleter)(void*) = nullptr;
  ~Storage();
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device{}; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  int64_t dim(int i) const { return shape_[i]; }

  void* raw() const { return storage_ ? storage_->data : nullptr; }
  // Typed host pointer; checks dtype matches T and the device is host-addressable.
  template <typename T>
  T* data() const;

  // Same storage, another shape with the same number of elements.
  Tensor Reshaped(Shape shape) const;

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  DType dtype_ = DType::kF32;
};

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};

template <typename T>
T* Tensor::data() const {
  MOTLEY_CHECK(defined(), "data() on an undefined tensor");
  MOTLEY_CHECK(DTypeOf<T>::value == dtype_, "data<T>() with the wrong dtype");
  MOTLEY_CHECK(device().host_addressable(), "data<T>() on device memory");
  return static_cast<T*>(storage_->data);
}

// Host tensors in plain malloc'd (64-byte aligned) memory, for tests, data loading and I/O.
Tensor HostTensor(Shape shape, DType dtype);  // zero-filled
Tensor HostTensorFrom(Shape shape, const std::vector<float>& values);
Tensor HostTensorFrom(Shape shape, const std::vector<int32_t>& values);

}  // namespace motley::tensor
