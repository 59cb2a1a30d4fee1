// Overflow-safe integer arithmetic for sizes and counts read from files and the command line
// (issue 17: a global batch of 2^62 times a sequence length must be an error, not a wrapped
// product). Each returns std::nullopt when the exact result does not fit int64_t. Pure;
// thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace motley {

inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of all factors, or nullopt on overflow at any point.
inline std::optional<int64_t> CheckedProduct(std::initializer_list<int64_t> factors) {
  int64_t r = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(r, f, &r)) return std::nullopt;
  }
  return r;
}

}  // namespace motley
