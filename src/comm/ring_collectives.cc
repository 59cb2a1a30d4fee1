// The collectives of RingCommunicator (ring_communicator_impl.h). Two paths:
// - shared memory (local backend, no link emulation): one rendezvous per call, each rank reads and
//   writes its peers' tensors directly (shared_collectives.h);
// - ring (every other case, and always under emulation): reduce-scatter and all-gather rings,
//   all-reduce = both, a pipelined chain broadcast and a dissemination barrier, each step a
//   charged point-to-point transfer, so that the emulated time comes out of the algorithm.
#include <algorithm>
#include <cstring>

#include <fmt/core.h>

#include "comm/ring_communicator.h"
#include "comm/ring_communicator_impl.h"
#include "comm/shared_collectives.h"

namespace motley::comm::internal {

using tensor::Tensor;

bool RingCommunicator::UseShared() const {
  return !shared_->emulation.enabled() && shared_->transport->has_shared_memory();
}

Status RingCommunicator::Shared(const OpCtx& ctx, uint64_t bytes, SharedBuffers mine,
                                const SharedWork& work) {
  const Envelope env{static_cast<uint32_t>(ctx.kind), 0, bytes, ctx.total, ctx.meta, 0.0};
  const WaitInfo info{ctx.name, &name_, &members_};
  return shared_->transport->SharedCollective(context_, ctx.tag, members_, rank_, env, mine, work,
                                              ctx.deadline, info);
}

Status RingCommunicator::AllReduce(Tensor& data, ReduceOp op) {
  MOTLEY_RETURN_IF_ERROR(Enter("AllReduce", {&data}, true));
  Activity guard(this, "AllReduce");
  const int n = size();
  if (n == 1) return Status::Ok();
  const size_t es = tensor::DTypeSize(data.dtype());
  const auto counts = EvenCounts(data.numel(), n);
  const auto offsets = Offsets(counts);
  auto* base = static_cast<char*>(data.raw());
  const double bytes = static_cast<double>(data.bytes());
  OpCtx ctx{"AllReduce",
            OpKind::kAllReduce,
            HashWords({static_cast<uint64_t>(data.dtype()), static_cast<uint64_t>(op)}),
            static_cast<uint64_t>(data.numel()),
            NextTag(),
            DeadlineFor(2.0 * bytes, RingAllReduceTime(RingLinks(), bytes))};
  if (UseShared()) {
    const int64_t numel = data.numel();
    const tensor::DType dtype = data.dtype();
    return Shared(ctx, data.bytes(), SharedBuffers{base, base},
                  [&](const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next) {
                    SharedAllReduceWork(all, next, numel, dtype, op);
                  });
  }
  const ReduceSpec spec{data.dtype(), op};
  auto chunk = [&](int c) { return base + static_cast<size_t>(offsets[Idx(c)]) * es; };
  auto chunk_bytes = [&](int c) { return static_cast<size_t>(counts[Idx(c)]) * es; };
  for (int s = 0; s < n - 1; ++s) {  // reduce-scatter: rank r ends owning chunk r
    const int cs = Mod(rank_ - s - 1), cr = Mod(rank_ - s - 2);
    MOTLEY_RETURN_IF_ERROR(Exchange(ctx, static_cast<uint32_t>(s), chunk(cs), chunk_bytes(cs),
                                    chunk(cr), chunk_bytes(cr), &spec));
  }
  for (int s = 0; s < n - 1; ++s) {  // all-gather of the reduced chunks
    const int cs = Mod(rank_ - s), cr = Mod(rank_ - s - 1);
    MOTLEY_RETURN_IF_ERROR(Exchange(ctx, static_cast<uint32_t>(n + s), chunk(cs), chunk_bytes(cs),
                                    chunk(cr), chunk_bytes(cr), nullptr));
  }
  return Status::Ok();
}

Status RingCommunicator::ReduceScatter(Tensor& out, const Tensor& in,
                                       const std::vector<int64_t>& counts, ReduceOp op) {
  MOTLEY_RETURN_IF_ERROR(Enter("ReduceScatter", {&out, &in}, true));
  Activity guard(this, "ReduceScatter");
  MOTLEY_RETURN_IF_ERROR(CheckCounts("ReduceScatter", counts, in, out, /*gather=*/false));
  const int n = size();
  const size_t es = tensor::DTypeSize(in.dtype());
  const auto offsets = Offsets(counts);
  const auto* in_base = static_cast<const char*>(in.raw());
  auto in_chunk = [&](int c) { return in_base + static_cast<size_t>(offsets[Idx(c)]) * es; };
  auto chunk_bytes = [&](int c) { return static_cast<size_t>(counts[Idx(c)]) * es; };
  if (n == 1) {
    if (out.bytes() > 0) std::memmove(out.raw(), in.raw(), out.bytes());
    return Status::Ok();
  }
  const double bytes = static_cast<double>(in.bytes());
  OpCtx ctx{"ReduceScatter",
            OpKind::kReduceScatter,
            HashWords({static_cast<uint64_t>(in.dtype()), static_cast<uint64_t>(op)}, &counts),
            static_cast<uint64_t>(in.numel()),
            NextTag(),
            DeadlineFor(bytes, RingReduceScatterTime(RingLinks(), bytes))};
  if (UseShared()) {
    const tensor::DType dtype = in.dtype();
    return Shared(ctx, in.bytes(), SharedBuffers{in.raw(), out.raw()},
                  [&](const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next) {
                    SharedReduceScatterWork(all, next, counts, dtype, op);
                  });
  }
  const ReduceSpec spec{in.dtype(), op};
  const int64_t max_count = *std::max_element(counts.begin(), counts.end());
  const size_t words = (static_cast<size_t>(max_count) * es + 7) / 8;
  std::vector<double>* temp = scratch_;  // reused across calls: no page faults per call
  for (int b = 0; b < 2; ++b) {
    if (temp[b].size() < words) temp[b].resize(words);
  }
  for (int s = 0; s < n - 1; ++s) {
    const int cs = Mod(rank_ - s - 1), cr = Mod(rank_ - s - 2);
    const void* send = s == 0 ? static_cast<const void*>(in_chunk(cs)) : temp[(s - 1) % 2].data();
    void* recv = s == n - 2 ? out.raw() : temp[s % 2].data();
    if (chunk_bytes(cr) > 0) std::memcpy(recv, in_chunk(cr), chunk_bytes(cr));  // own share
    MOTLEY_RETURN_IF_ERROR(Exchange(ctx, static_cast<uint32_t>(s), send, chunk_bytes(cs), recv,
                                    chunk_bytes(cr), &spec));
  }
  return Status::Ok();
}

Status RingCommunicator::AllGather(Tensor& out, const Tensor& in,
                                   const std::vector<int64_t>& counts) {
  MOTLEY_RETURN_IF_ERROR(Enter("AllGather", {&out, &in}, false));
  Activity guard(this, "AllGather");
  MOTLEY_RETURN_IF_ERROR(CheckCounts("AllGather", counts, out, in, /*gather=*/true));
  const int n = size();
  const size_t es = tensor::DTypeSize(in.dtype());
  const auto offsets = Offsets(counts);
  auto* base = static_cast<char*>(out.raw());
  auto chunk = [&](int c) { return base + static_cast<size_t>(offsets[Idx(c)]) * es; };
  auto chunk_bytes = [&](int c) { return static_cast<size_t>(counts[Idx(c)]) * es; };
  if (n == 1) {
    if (chunk_bytes(rank_) > 0) std::memmove(chunk(rank_), in.raw(), chunk_bytes(rank_));
    return Status::Ok();
  }
  const double bytes = static_cast<double>(out.bytes());
  OpCtx ctx{"AllGather",
            OpKind::kAllGather,
            HashWords({static_cast<uint64_t>(in.dtype())}, &counts),
            static_cast<uint64_t>(out.numel()),
            NextTag(),
            DeadlineFor(bytes, RingAllGatherTime(RingLinks(), bytes))};
  if (UseShared()) {
    return Shared(ctx, out.bytes(), SharedBuffers{in.raw(), out.raw()},
                  [&](const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next) {
                    SharedAllGatherWork(all, next, counts, es);
                  });
  }
  if (chunk_bytes(rank_) > 0) std::memmove(chunk(rank_), in.raw(), chunk_bytes(rank_));
  for (int s = 0; s < n - 1; ++s) {
    const int cs = Mod(rank_ - s), cr = Mod(rank_ - s - 1);
    MOTLEY_RETURN_IF_ERROR(Exchange(ctx, static_cast<uint32_t>(s), chunk(cs), chunk_bytes(cs),
                                    chunk(cr), chunk_bytes(cr), nullptr));
  }
  return Status::Ok();
}

Status RingCommunicator::Broadcast(Tensor& data, int root) {
  MOTLEY_RETURN_IF_ERROR(Enter("Broadcast", {&data}, false));
  Activity guard(this, "Broadcast");
  const int n = size();
  if (root < 0 || root >= n) {
    return Err("Broadcast on group '{}': root {} out of range [0, {})", name_, root, n);
  }
  if (n == 1) return Status::Ok();
  const int pos = Mod(rank_ - root);  // position along the chain root -> root+1 -> ...
  const size_t total = data.bytes();
  const size_t es = tensor::DTypeSize(data.dtype());
  const size_t chunk = std::max(es, kBroadcastChunkBytes / es * es);
  const size_t nchunks = std::max<size_t>(1, (total + chunk - 1) / chunk);
  auto* base = static_cast<char*>(data.raw());
  auto at = [&](size_t k) { return base + std::min(total, k * chunk); };
  auto len = [&](size_t k) {
    return std::min(total, (k + 1) * chunk) - std::min(total, k * chunk);
  };
  const double bytes = static_cast<double>(total);
  Seconds emulated = 0.0;
  for (const LinkModel& l : RingLinks()) emulated += l.TransferTime(bytes);
  OpCtx ctx{"Broadcast",
            OpKind::kBroadcast,
            HashWords({static_cast<uint64_t>(data.dtype()), static_cast<uint64_t>(root)}),
            static_cast<uint64_t>(data.numel()),
            NextTag(),
            DeadlineFor(bytes, emulated)};
  if (UseShared()) {
    return Shared(ctx, total, SharedBuffers{base, base},
                  [&](const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next) {
                    SharedBroadcastWork(all, next, root, total);
                  });
  }
  const int to = pos < n - 1 ? Mod(rank_ + 1) : -1;
  const int from = pos > 0 ? Mod(rank_ - 1) : -1;
  for (size_t j = 0; j <= nchunks; ++j) {
    // The root sends chunk j at step j; others receive chunk j and forward chunk j-1.
    const bool do_send = to >= 0 && (pos == 0 ? j < nchunks : j >= 1);
    const size_t ks = pos == 0 ? j : j - 1;
    const bool do_recv = from >= 0 && j < nchunks;
    if (!do_send && !do_recv) continue;
    MOTLEY_RETURN_IF_ERROR(ExchangeWith(ctx, static_cast<uint32_t>(j), do_send ? to : -1,
                                        do_send ? at(ks) : nullptr, do_send ? len(ks) : 0,
                                        do_recv ? from : -1, do_recv ? at(j) : nullptr,
                                        do_recv ? len(j) : 0, nullptr));
  }
  return Status::Ok();
}

Status RingCommunicator::Barrier() {
  MOTLEY_RETURN_IF_ERROR(Enter("Barrier", {}, false));
  Activity guard(this, "Barrier");
  const int n = size();
  Seconds emulated = 0.0;
  for (const LinkModel& l : RingLinks()) emulated = std::max(emulated, l.latency_s);
  OpCtx ctx{"Barrier", OpKind::kBarrier, 0, 0, NextTag(), DeadlineFor(0.0, 2.0 * emulated)};
  if (UseShared()) {
    return Shared(ctx, 0, SharedBuffers{},
                  [](const std::vector<SharedBuffers>&, std::atomic<uint64_t>&) {});
  }
  uint32_t round = 0;
  for (int k = 1; k < n; k *= 2, ++round) {  // dissemination: ceil(log2 n) rounds
    MOTLEY_RETURN_IF_ERROR(
        ExchangeWith(ctx, round, Mod(rank_ + k), nullptr, 0, Mod(rank_ - k), nullptr, 0, nullptr));
  }
  return Status::Ok();
}

}  // namespace motley::comm::internal
