// See transport.h: the helpers shared by every transport.
#include "comm/transport.h"

#include <algorithm>
#include <cstring>

#include <fmt/core.h>

#include "comm/reduce_kernels.h"

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

Status ReduceInto(void* dst, const void* src, size_t bytes, const ReduceSpec& spec) {
  if (!IsReducible(spec.dtype)) {
    return Err("reduction of dtype {} is not supported (f32, f64, i32 are)",
               tensor::DTypeName(spec.dtype));
  }
  ReduceElements(dst, src, bytes / tensor::DTypeSize(spec.dtype), spec.dtype, spec.op);
  return Status::Ok();
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
