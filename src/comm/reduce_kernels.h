// Element-wise reduction kernels of the communicator: dst[i] = op(dst[i], src[i]) over f32, f64
// and i32. Compiled with -O3 (src/comm/CMakeLists.txt) so that GCC vectorizes them; at the default
// -O2 GCC 12 leaves these loops scalar, which made reductions of cache-resident chunks 3-8x slower
// than a memcpy of the same bytes (measured with a micro-benchmark on the 2-core dev machine).
// Internal to comm. Thread safety: pure functions.
#pragma once

#include <cstddef>

#include "comm/communicator.h"
#include "core/status.h"
#include "tensor/tensor.h"

namespace motley::comm {

// dst (count elements) = op(dst, src). dst and src must not overlap. The dtype must be f32, f64
// or i32 (callers check; other dtypes are a bug).
void ReduceElements(void* dst, const void* src, size_t count, tensor::DType dtype, ReduceOp op);

// a (count) = b (count) = op(a, b): the two-rank all-reduce step in one pass. a and b must not
// overlap. Same dtypes as ReduceElements.
void ReduceElementsBoth(void* a, void* b, size_t count, tensor::DType dtype, ReduceOp op);

// Whether ReduceElements supports `dtype`.
bool IsReducible(tensor::DType dtype);

}  // namespace motley::comm
