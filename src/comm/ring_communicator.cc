// See ring_communicator.h.
#include "comm/ring_communicator.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/core.h>

namespace motley::comm {
namespace {

using tensor::DType;
using tensor::Tensor;
using Clock = std::chrono::steady_clock;

// Per rank, shared by the world communicator and every subgroup split from it.
struct RankShared {
  std::shared_ptr<Transport> transport;
  CommOptions options;
  Emulation emulation;
  std::vector<Seconds> link_free_at;  // per destination world rank (sender's outgoing links)
};

uint64_t HashWords(std::initializer_list<uint64_t> words, const std::vector<int64_t>* extra = nullptr) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a offset basis
  auto mix = [&h](uint64_t w) {
    for (int i = 0; i < 8; ++i) {
      h ^= (w >> (8 * i)) & 0xFFU;
      h *= 1099511628211ULL;  // FNV-1a prime
    }
  };
  for (uint64_t w : words) mix(w);
  if (extra != nullptr) {
    for (int64_t w : *extra) mix(static_cast<uint64_t>(w));
  }
  return h;
}

struct OpCtx {
  const char* name;
  OpKind kind;
  uint64_t meta;
  uint64_t total;
  int64_t tag;
  Transport::Deadline deadline;
};

struct RingRequest : RequestImpl {
  TransportRequestPtr req;
  std::tuple<int, int, bool> key;  // (peer, tag, is_send)
  size_t bytes = 0;
  int peer = 0;
};

class RingCommunicator final : public Communicator {
 public:
  RingCommunicator(std::shared_ptr<RankShared> shared, uint64_t context, std::vector<int> members,
                   int rank, std::string name)
      : shared_(std::move(shared)),
        context_(context),
        members_(std::move(members)),
        rank_(rank),
        name_(std::move(name)) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::string& name() const override { return name_; }

  Status AllReduce(Tensor& data, ReduceOp op) override {
    MOTLEY_RETURN_IF_ERROR(Enter("AllReduce", {&data}, true));
    Activity guard(this, "AllReduce");
    const int n = size();
    if (n == 1) return Status::Ok();
    const size_t es = tensor::DTypeSize(data.dtype());
    const auto counts = EvenCounts(data.numel(), n);
    const auto offsets = Offsets(counts);
    auto* base = static_cast<char*>(data.raw());
    const double bytes = static_cast<double>(data.bytes());
    OpCtx ctx{"AllReduce", OpKind::kAllReduce,
              HashWords({static_cast<uint64_t>(data.dtype()), static_cast<uint64_t>(op)}),
              static_cast<uint64_t>(data.numel()), NextTag(),
              DeadlineFor(2.0 * bytes, RingAllReduceTime(RingLinks(), bytes))};
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
      MOTLEY_RETURN_IF_ERROR(Exchange(ctx, static_cast<uint32_t>(n + s), chunk(cs),
                                      chunk_bytes(cs), chunk(cr), chunk_bytes(cr), nullptr));
    }
    return Status::Ok();
  }

  Status ReduceScatter(Tensor& out, const Tensor& in, const std::vector<int64_t>& counts,
                       ReduceOp op) override {
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
    OpCtx ctx{"ReduceScatter", OpKind::kReduceScatter,
              HashWords({static_cast<uint64_t>(in.dtype()), static_cast<uint64_t>(op)}, &counts),
              static_cast<uint64_t>(in.numel()), NextTag(),
              DeadlineFor(bytes, RingReduceScatterTime(RingLinks(), bytes))};
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

  Status AllGather(Tensor& out, const Tensor& in, const std::vector<int64_t>& counts) override {
    MOTLEY_RETURN_IF_ERROR(Enter("AllGather", {&out, &in}, false));
    Activity guard(this, "AllGather");
    MOTLEY_RETURN_IF_ERROR(CheckCounts("AllGather", counts, out, in, /*gather=*/true));
    const int n = size();
    const size_t es = tensor::DTypeSize(in.dtype());
    const auto offsets = Offsets(counts);
    auto* base = static_cast<char*>(out.raw());
    auto chunk = [&](int c) { return base + static_cast<size_t>(offsets[Idx(c)]) * es; };
    auto chunk_bytes = [&](int c) { return static_cast<size_t>(counts[Idx(c)]) * es; };
    if (chunk_bytes(rank_) > 0) std::memmove(chunk(rank_), in.raw(), chunk_bytes(rank_));
    if (n == 1) return Status::Ok();
    const double bytes = static_cast<double>(out.bytes());
    OpCtx ctx{"AllGather", OpKind::kAllGather,
              HashWords({static_cast<uint64_t>(in.dtype())}, &counts),
              static_cast<uint64_t>(out.numel()), NextTag(),
              DeadlineFor(bytes, RingAllGatherTime(RingLinks(), bytes))};
    for (int s = 0; s < n - 1; ++s) {
      const int cs = Mod(rank_ - s), cr = Mod(rank_ - s - 1);
      MOTLEY_RETURN_IF_ERROR(Exchange(ctx, static_cast<uint32_t>(s), chunk(cs), chunk_bytes(cs),
                                      chunk(cr), chunk_bytes(cr), nullptr));
    }
    return Status::Ok();
  }

  Status Broadcast(Tensor& data, int root) override {
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
    auto len = [&](size_t k) { return std::min(total, (k + 1) * chunk) - std::min(total, k * chunk); };
    const double bytes = static_cast<double>(total);
    Seconds emulated = 0.0;
    for (const LinkModel& l : RingLinks()) emulated += l.TransferTime(bytes);
    OpCtx ctx{"Broadcast", OpKind::kBroadcast,
              HashWords({static_cast<uint64_t>(data.dtype()), static_cast<uint64_t>(root)}),
              static_cast<uint64_t>(data.numel()), NextTag(), DeadlineFor(bytes, emulated)};
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

  Status Barrier() override {
    MOTLEY_RETURN_IF_ERROR(Enter("Barrier", {}, false));
    Activity guard(this, "Barrier");
    const int n = size();
    Seconds emulated = 0.0;
    for (const LinkModel& l : RingLinks()) emulated = std::max(emulated, l.latency_s);
    OpCtx ctx{"Barrier", OpKind::kBarrier, 0, 0, NextTag(), DeadlineFor(0.0, 2.0 * emulated)};
    uint32_t round = 0;
    for (int k = 1; k < n; k *= 2, ++round) {  // dissemination: ceil(log2 n) rounds
      MOTLEY_RETURN_IF_ERROR(
          ExchangeWith(ctx, round, Mod(rank_ + k), nullptr, 0, Mod(rank_ - k), nullptr, 0, nullptr));
    }
    return Status::Ok();
  }

  Status Send(const Tensor& data, int peer, int tag) override {
    MOTLEY_ASSIGN_OR_RETURN(Request r, ISend(data, peer, tag));
    return Wait(r);
  }
  Status Recv(Tensor& data, int peer, int tag) override {
    MOTLEY_ASSIGN_OR_RETURN(Request r, IRecv(data, peer, tag));
    return Wait(r);
  }

  Result<Request> ISend(const Tensor& data, int peer, int tag) override {
    return PostP2p(const_cast<Tensor&>(data), peer, tag, /*is_send=*/true);
  }
  Result<Request> IRecv(Tensor& data, int peer, int tag) override {
    return PostP2p(data, peer, tag, /*is_send=*/false);
  }

  Status Wait(Request& request) override {
    auto* r = dynamic_cast<RingRequest*>(request.impl());
    if (r == nullptr) return Err("Wait on group '{}': empty or foreign request", name_);
    const char* op = std::get<2>(r->key) ? "Send" : "Recv";
    Activity guard(this, op);
    const double bytes = static_cast<double>(r->bytes);
    const Seconds emulated = Link(members_[Idx(r->peer)]).TransferTime(bytes);
    const WaitInfo info{op, &name_, &members_};
    Status s = shared_->transport->WaitAll({r->req}, DeadlineFor(bytes, emulated), info);
    pending_.erase(r->key);
    if (s.ok() && !r->req->is_send) Arrive(r->req->envelope.arrival_s);
    request.reset();
    return s;
  }

  void Abort(const std::string& reason) override {
    shared_->transport->Abort(fmt::format("{} (group '{}', rank {})", reason, name_, rank_));
  }

  Result<std::unique_ptr<Communicator>> Split(int color, int key) override {
    MOTLEY_RETURN_IF_ERROR(Enter("Split", {}, false));
    if (color < 0 && color != kUndefinedColor) {
      return Err("Split on group '{}': color must be >= 0 or kUndefinedColor, got {}", name_,
                 color);
    }
    Activity guard(this, "Split");
    const int n = size();
    std::vector<int32_t> table(static_cast<size_t>(2 * n));
    table[Idx(2 * rank_)] = color;
    table[Idx(2 * rank_ + 1)] = key;
    const uint64_t seq = split_seq_++;
    OpCtx ctx{"Split", OpKind::kSplit, HashWords({seq}), static_cast<uint64_t>(2 * n), NextTag(),
              DeadlineFor(0.0, 0.0)};
    for (int s = 0; s < n - 1; ++s) {  // ring all-gather of (color, key)
      const int cs = Mod(rank_ - s), cr = Mod(rank_ - s - 1);
      MOTLEY_RETURN_IF_ERROR(Exchange(ctx, static_cast<uint32_t>(s), &table[Idx(2 * cs)],
                                      2 * sizeof(int32_t), &table[Idx(2 * cr)],
                                      2 * sizeof(int32_t), nullptr));
    }
    if (color == kUndefinedColor) return std::unique_ptr<Communicator>();
    std::vector<std::pair<int32_t, int>> order;  // (key, group rank) of my color
    for (int g = 0; g < n; ++g) {
      if (table[Idx(2 * g)] == color) order.emplace_back(table[Idx(2 * g + 1)], g);
    }
    std::sort(order.begin(), order.end());
    std::vector<int> members;
    int new_rank = -1;
    for (const auto& [k, g] : order) {
      if (g == rank_) new_rank = static_cast<int>(members.size());
      members.push_back(members_[Idx(g)]);
    }
    const uint64_t context = HashWords({context_, seq, static_cast<uint64_t>(color)});
    MOTLEY_RETURN_IF_ERROR(shared_->transport->CreateContext(context, members)
                               .WithContext(fmt::format("Split on group '{}'", name_)));
    return std::unique_ptr<Communicator>(new RingCommunicator(
        shared_, context, std::move(members), new_rank,
        fmt::format("{}/split{}.c{}", name_, seq, color)));
  }

 private:
  // Marks this rank busy in `op` for liveness reports, until the end of the scope.
  struct Activity {
    Activity(RingCommunicator* c, const char* op) : comm(c) {
      comm->shared_->transport->SetActivity(fmt::format("{} on group '{}'", op, comm->name_));
    }
    ~Activity() { comm->shared_->transport->SetActivity(""); }
    RingCommunicator* comm;
  };

  static size_t Idx(int i) { return static_cast<size_t>(i); }
  int Mod(int i) const { return ((i % size()) + size()) % size(); }
  static std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
    std::vector<int64_t> off(counts.size(), 0);
    for (size_t i = 1; i < counts.size(); ++i) off[i] = off[i - 1] + counts[i - 1];
    return off;
  }
  int64_t NextTag() { return kMaxUserTag + 1 + static_cast<int64_t>(coll_seq_++ % (1U << 30)); }

  LinkModel Link(int dst_world) const {
    const Emulation& e = shared_->emulation;
    if (!e.enabled()) return LinkModel{0.0, std::numeric_limits<double>::infinity()};
    return e.links->link(shared_->transport->world_rank(), dst_world);
  }
  std::vector<LinkModel> RingLinks() const {
    std::vector<LinkModel> links;
    const Emulation& e = shared_->emulation;
    if (!e.enabled() || size() < 2) return links;
    for (int g = 0; g < size(); ++g) {
      links.push_back(e.links->link(members_[Idx(g)], members_[Idx(Mod(g + 1))]));
    }
    return links;
  }

  // Deadline: max(floor, scale * expected), expected = bytes at the nominal rate plus, on the
  // wall clock, the emulated time of the operation.
  Transport::Deadline DeadlineFor(double moved_bytes, Seconds emulated_s) const {
    const CommOptions& o = shared_->options;
    const Emulation& e = shared_->emulation;
    Seconds expected = moved_bytes / o.nominal_bandwidth_bytes_per_s;
    if (e.enabled() && e.clock->mode() == VirtualClock::Mode::kWall) {
      expected += emulated_s * e.payload_scale;
    }
    const Seconds budget = std::max(o.deadline_floor_s, o.deadline_scale * expected);
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(budget));
  }

  Status Enter(const char* op, std::initializer_list<const Tensor*> tensors, bool reduces) {
    MOTLEY_RETURN_IF_ERROR(shared_->transport->abort_status().WithContext(
        fmt::format("{} on group '{}'", op, name_)));
    const Tensor* first = nullptr;
    for (const Tensor* t : tensors) {
      if (!t->defined()) return Err("{} on group '{}': undefined tensor", op, name_);
      if (!shared_->transport->CanAccess(t->device())) {
        return Err("{} on group '{}': the {} transport cannot access {} memory; stage it through "
                   "host memory (HierarchicalCommunicator does)",
                   op, name_, shared_->transport->backend_name(), tensor::DeviceName(t->device()));
      }
      if (first != nullptr && first->dtype() != t->dtype()) {
        return Err("{} on group '{}': dtypes differ ({} vs {})", op, name_,
                   tensor::DTypeName(first->dtype()), tensor::DTypeName(t->dtype()));
      }
      first = t;
    }
    if (reduces && first != nullptr && first->dtype() == DType::kBF16) {
      return Err("{} on group '{}': reduction of bf16 is not supported (f32, f64, i32 are)", op,
                 name_);
    }
    return Status::Ok();
  }

  // full (sum(counts)) and part (counts[rank]) of a ReduceScatter (full = in) or AllGather.
  Status CheckCounts(const char* op, const std::vector<int64_t>& counts, const Tensor& full,
                     const Tensor& part, bool gather) const {
    if (static_cast<int>(counts.size()) != size()) {
      return Err("{} on group '{}': counts has {} entries, the group has {} ranks", op, name_,
                 counts.size(), size());
    }
    int64_t sum = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] < 0) return Err("{} on group '{}': counts[{}] = {} < 0", op, name_, i, counts[i]);
      sum += counts[i];
    }
    if (sum != full.numel()) {
      return Err("{} on group '{}': sum(counts) = {} but the {} tensor has {} elements", op, name_,
                 sum, gather ? "output" : "input", full.numel());
    }
    if (part.numel() != counts[Idx(rank_)]) {
      return Err("{} on group '{}': counts[{}] = {} but the {} tensor has {} elements", op, name_,
                 rank_, counts[Idx(rank_)], gather ? "input" : "output", part.numel());
    }
    return Status::Ok();
  }

  Status Exchange(const OpCtx& ctx, uint32_t step, const void* send, size_t send_bytes, void* recv,
                  size_t recv_bytes, const ReduceSpec* reduce) {
    return ExchangeWith(ctx, step, Mod(rank_ + 1), send, send_bytes, Mod(rank_ - 1), recv,
                        recv_bytes, reduce);
  }

  // One step: a send to group rank `to` and a receive from `from` (either may be -1), then the wait.
  Status ExchangeWith(const OpCtx& ctx, uint32_t step, int to, const void* send, size_t send_bytes,
                      int from, void* recv, size_t recv_bytes, const ReduceSpec* reduce) {
    Transport& tp = *shared_->transport;
    std::vector<TransportRequestPtr> reqs;
    const WaitInfo info{ctx.name, &name_, &members_};
    if (from >= 0) {
      Envelope expect{static_cast<uint32_t>(ctx.kind), step, recv_bytes, ctx.total, ctx.meta, 0.0};
      auto r = tp.PostRecv(members_[Idx(from)], context_, ctx.tag, recv, expect, reduce);
      if (!r.ok()) return r.status().WithContext(fmt::format("{} on group '{}'", ctx.name, name_));
      reqs.push_back(std::move(r).value());
    }
    if (to >= 0) {
      Envelope env{static_cast<uint32_t>(ctx.kind), step, send_bytes, ctx.total, ctx.meta, 0.0};
      env.arrival_s = Charge(members_[Idx(to)], send_bytes);
      auto r = tp.PostSend(members_[Idx(to)], context_, ctx.tag, send, env);
      if (!r.ok()) {
        Status cancel = tp.WaitAll(reqs, Clock::now(), info);  // cancels the posted receive
        (void)cancel;
        return r.status().WithContext(fmt::format("{} on group '{}'", ctx.name, name_));
      }
      reqs.push_back(std::move(r).value());
    }
    MOTLEY_RETURN_IF_ERROR(tp.WaitAll(reqs, ctx.deadline, info));
    if (from >= 0) Arrive(reqs.front()->envelope.arrival_s);
    return Status::Ok();
  }

  // Virtual time at which `bytes` sent now to `dst_world` arrive; books the sender's link.
  Seconds Charge(int dst_world, size_t bytes) {
    const Emulation& e = shared_->emulation;
    if (!e.enabled()) return 0.0;
    Seconds& free_at = shared_->link_free_at[Idx(dst_world)];
    const Seconds start = std::max(e.clock->now(), free_at);
    free_at = start + Link(dst_world).TransferTime(static_cast<double>(bytes) * e.payload_scale);
    return free_at;
  }
  void Arrive(Seconds arrival_s) {
    const Emulation& e = shared_->emulation;
    if (e.enabled()) e.clock->AdvanceTo(arrival_s);
  }

  Result<Request> PostP2p(Tensor& data, int peer, int tag, bool is_send) {
    const char* op = is_send ? "Send" : "Recv";
    MOTLEY_RETURN_IF_ERROR(Enter(op, {&data}, false));
    if (peer < 0 || peer >= size()) {
      return Err("{} on group '{}': peer {} out of range [0, {})", op, name_, peer, size());
    }
    if (tag < 0 || tag > kMaxUserTag) {
      return Err("{} on group '{}': tag {} out of range [0, {}]", op, name_, tag, kMaxUserTag);
    }
    auto key = std::make_tuple(peer, tag, is_send);
    if (pending_.count(key) != 0) {
      return Err("{} on group '{}': tag {} with peer {} is already in use by a pending {}", op,
                 name_, tag, peer, op);
    }
    Transport& tp = *shared_->transport;
    Envelope env{static_cast<uint32_t>(OpKind::kSend), 0, data.bytes(),
                 static_cast<uint64_t>(data.numel()),
                 HashWords({static_cast<uint64_t>(data.dtype())}), 0.0};
    auto r = std::make_unique<RingRequest>();
    Result<TransportRequestPtr> posted =
        is_send ? tp.PostSend(members_[Idx(peer)], context_, tag, data.raw(),
                              (env.arrival_s = Charge(members_[Idx(peer)], data.bytes()), env))
                : tp.PostRecv(members_[Idx(peer)], context_, tag, data.raw(), env, nullptr);
    if (!posted.ok()) return posted.status().WithContext(fmt::format("{} on group '{}'", op, name_));
    r->req = std::move(posted).value();
    r->key = key;
    r->bytes = data.bytes();
    r->peer = peer;
    pending_.insert(key);
    return Request(std::move(r));
  }

  std::shared_ptr<RankShared> shared_;
  uint64_t context_;
  std::vector<int> members_;  // group rank -> world rank
  int rank_;
  std::string name_;
  uint64_t coll_seq_ = 0;
  uint64_t split_seq_ = 0;
  std::set<std::tuple<int, int, bool>> pending_;
  std::vector<double> scratch_[2];  // ReduceScatter's ping-pong chunk buffers
};

}  // namespace

Result<std::unique_ptr<Communicator>> MakeRingWorld(std::shared_ptr<Transport> transport,
                                                    const CommOptions& options,
                                                    const Emulation& emulation) {
  MOTLEY_CHECK(transport != nullptr, "MakeRingWorld without a transport");
  const int n = transport->world_size();
  if (emulation.links != nullptr) {
    if (emulation.links->world_size() != n) {
      return Err("emulation: the link matrix covers {} ranks, the world has {}",
                 emulation.links->world_size(), n);
    }
    MOTLEY_RETURN_IF_ERROR(emulation.links->Validate().WithContext("emulation"));
  }
  if (!(emulation.payload_scale > 0.0)) {
    return Err("emulation: payload_scale must be > 0, got {}", emulation.payload_scale);
  }
  if (!(options.deadline_floor_s > 0.0) || !(options.deadline_scale > 0.0) ||
      !(options.nominal_bandwidth_bytes_per_s > 0.0)) {
    return Err("comm options: deadline_floor_s, deadline_scale and nominal_bandwidth_bytes_per_s "
               "must be > 0");
  }
  auto shared = std::make_shared<RankShared>();
  shared->options = options;
  shared->emulation = emulation;
  shared->link_free_at.assign(static_cast<size_t>(n), 0.0);
  const int rank = transport->world_rank();
  shared->transport = std::move(transport);
  std::vector<int> members(static_cast<size_t>(n));
  std::iota(members.begin(), members.end(), 0);
  return std::unique_ptr<Communicator>(
      new RingCommunicator(std::move(shared), /*context=*/1, std::move(members), rank, "world"));
}

}  // namespace motley::comm
