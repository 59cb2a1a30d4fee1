// See reduce_kernels.h. Plain loops over __restrict pointers: with -O3 GCC emits SIMD code for
// every branch below (add and max of f32/f64/i32).
#include "comm/reduce_kernels.h"

#include <algorithm>
#include <cstdint>

#include "core/check.h"

namespace motley::comm {
namespace {

template <typename T>
void SumInto(T* __restrict d, const T* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] += s[i];
}

template <typename T>
void MaxInto(T* __restrict d, const T* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = d[i] < s[i] ? s[i] : d[i];
}

template <typename T>
void BothTyped(void* a_raw, void* b_raw, size_t n, ReduceOp op) {
  T* __restrict a = static_cast<T*>(a_raw);
  T* __restrict b = static_cast<T*>(b_raw);
  if (op == ReduceOp::kSum) {
    for (size_t i = 0; i < n; ++i) a[i] = b[i] = a[i] + b[i];
  } else {
    for (size_t i = 0; i < n; ++i) a[i] = b[i] = a[i] < b[i] ? b[i] : a[i];
  }
}

template <typename T>
void Typed(void* dst, const void* src, size_t n, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    SumInto(static_cast<T*>(dst), static_cast<const T*>(src), n);
  } else {
    MaxInto(static_cast<T*>(dst), static_cast<const T*>(src), n);
  }
}

}  // namespace

bool IsReducible(tensor::DType dtype) {
  return dtype == tensor::DType::kF32 || dtype == tensor::DType::kF64 ||
         dtype == tensor::DType::kI32;
}

void ReduceElements(void* dst, const void* src, size_t count, tensor::DType dtype, ReduceOp op) {
  switch (dtype) {
    case tensor::DType::kF32: Typed<float>(dst, src, count, op); return;
    case tensor::DType::kF64: Typed<double>(dst, src, count, op); return;
    case tensor::DType::kI32: Typed<int32_t>(dst, src, count, op); return;
    case tensor::DType::kBF16: break;
  }
  MOTLEY_CHECK(false, "ReduceElements: dtype is not reducible (callers check IsReducible)");
}

void ReduceElementsBoth(void* a, void* b, size_t count, tensor::DType dtype, ReduceOp op) {
  switch (dtype) {
    case tensor::DType::kF32: BothTyped<float>(a, b, count, op); return;
    case tensor::DType::kF64: BothTyped<double>(a, b, count, op); return;
    case tensor::DType::kI32: BothTyped<int32_t>(a, b, count, op); return;
    case tensor::DType::kBF16: break;
  }
  MOTLEY_CHECK(false, "ReduceElementsBoth: dtype is not reducible (callers check IsReducible)");
}

}  // namespace motley::comm
