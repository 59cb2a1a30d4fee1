// See transport.h: reduction kernels and the helpers shared by every transport.
#include "comm/transport.h"

#include <algorithm>
#include <cstring>

#include <fmt/core.h>

namespace motley::comm {

const char* ReduceOpName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

const char* OpKindName(uint32_t kind) {
  switch (static_cast<OpKind>(kind)) {
    case OpKind::kSend: return "Send";
    case OpKind::kAllReduce: return "AllReduce";
    case OpKind::kReduceScatter: return "ReduceScatter";
    case OpKind::kAllGather: return "AllGather";
    case OpKind::kBroadcast: return "Broadcast";
    case OpKind::kBarrier: return "Barrier";
    case OpKind::kSplit: return "Split";
  }
  return "unknown-op";
}

std::vector<int64_t> EvenCounts(int64_t total, int n) {
  MOTLEY_CHECK(n > 0 && total >= 0, "EvenCounts needs n > 0 and total >= 0");
  std::vector<int64_t> counts(static_cast<size_t>(n), total / n);
  for (int64_t i = 0; i < total % n; ++i) ++counts[static_cast<size_t>(i)];
  return counts;
}

namespace {
template <typename T>
void ReduceTyped(void* dst, const void* src, size_t bytes, ReduceOp op) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  const size_t n = bytes / sizeof(T);
  if (op == ReduceOp::kSum) {
    for (size_t i = 0; i < n; ++i) d[i] += s[i];
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = std::max(d[i], s[i]);
  }
}
}  // namespace

Status ReduceInto(void* dst, const void* src, size_t bytes, const ReduceSpec& spec) {
  switch (spec.dtype) {
    case tensor::DType::kF32: ReduceTyped<float>(dst, src, bytes, spec.op); return Status::Ok();
    case tensor::DType::kF64: ReduceTyped<double>(dst, src, bytes, spec.op); return Status::Ok();
    case tensor::DType::kI32: ReduceTyped<int32_t>(dst, src, bytes, spec.op); return Status::Ok();
    case tensor::DType::kBF16: break;
  }
  return Err("reduction of dtype {} is not supported (f32, f64, i32 are)",
             tensor::DTypeName(spec.dtype));
}

Status CheckEnvelope(const Envelope& expect, const Envelope& got, int src_world) {
  if (expect.kind != got.kind) {
    return Err("operation mismatch: world rank {} called {} while this rank called {}", src_world,
               OpKindName(got.kind), OpKindName(expect.kind));
  }
  if (expect.total != got.total) {
    return Err("size mismatch in {}: world rank {} passed {} elements, this rank {}",
               OpKindName(expect.kind), src_world, got.total, expect.total);
  }
  if (expect.meta != got.meta) {
    return Err("argument mismatch in {}: world rank {} passed other counts, root, dtype or "
               "reduce op than this rank",
               OpKindName(expect.kind), src_world);
  }
  if (expect.bytes != got.bytes) {
    return Err("size mismatch in {}: world rank {} sent {} bytes, this rank expects {} bytes",
               OpKindName(expect.kind), src_world, got.bytes, expect.bytes);
  }
  return Status::Ok();
}

std::string DescribePeer(const WaitInfo& info, int world_rank) {
  int group_rank = -1;
  if (info.members != nullptr) {
    auto it = std::find(info.members->begin(), info.members->end(), world_rank);
    if (it != info.members->end()) group_rank = static_cast<int>(it - info.members->begin());
  }
  return fmt::format("rank {} (world rank {}) of group '{}'", group_rank, world_rank,
                     info.group != nullptr ? *info.group : std::string("?"));
}

}  // namespace motley::comm
