// See ring_communicator.h and ring_communicator_impl.h: construction, argument checks, deadlines,
// transfers charged on the virtual clock, point-to-point and Split. The collective algorithms are
// in ring_collectives.cc.
#include "comm/ring_communicator.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include <fmt/core.h>

#include "comm/ring_communicator_impl.h"
#include "comm/shared_collectives.h"

namespace motley::comm {
namespace internal {

using tensor::DType;
using tensor::Tensor;
using Clock = std::chrono::steady_clock;

uint64_t HashWords(std::initializer_list<uint64_t> words, const std::vector<int64_t>* extra) {
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

namespace {
struct RingRequest : RequestImpl {
  TransportRequestPtr req;
  std::tuple<int, int, bool> key;  // (peer, tag, is_send)
  size_t bytes = 0;
  int peer = 0;
};
}  // namespace

RingCommunicator::RingCommunicator(std::shared_ptr<RankShared> shared, uint64_t context,
                                   std::vector<int> members, int rank, std::string name)
    : shared_(std::move(shared)),
      context_(context),
      members_(std::move(members)),
      rank_(rank),
      name_(std::move(name)) {}

RingCommunicator::Activity::Activity(RingCommunicator* c, const char* op) : comm(c) {
  comm->shared_->transport->SetActivity(fmt::format("{} on group '{}'", op, comm->name_));
}
RingCommunicator::Activity::~Activity() {
  comm->shared_->transport->SetActivity("");
}

std::vector<int64_t> RingCommunicator::Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) off[i] = off[i - 1] + counts[i - 1];
  return off;
}

Status RingCommunicator::Send(const Tensor& data, int peer, int tag) {
  MOTLEY_ASSIGN_OR_RETURN(Request r, ISend(data, peer, tag));
  return Wait(r);
}
Status RingCommunicator::Recv(Tensor& data, int peer, int tag) {
  MOTLEY_ASSIGN_OR_RETURN(Request r, IRecv(data, peer, tag));
  return Wait(r);
}

Result<Request> RingCommunicator::ISend(const Tensor& data, int peer, int tag) {
  return PostP2p(const_cast<Tensor&>(data), peer, tag, /*is_send=*/true);
}
Result<Request> RingCommunicator::IRecv(Tensor& data, int peer, int tag) {
  return PostP2p(data, peer, tag, /*is_send=*/false);
}

Status RingCommunicator::Wait(Request& request) {
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

void RingCommunicator::Abort(const std::string& reason) {
  shared_->transport->Abort(fmt::format("{} (group '{}', rank {})", reason, name_, rank_));
}

Result<std::unique_ptr<Communicator>> RingCommunicator::Split(int color, int key) {
  MOTLEY_RETURN_IF_ERROR(Enter("Split", {}, false));
  if (color < 0 && color != kUndefinedColor) {
    return Err("Split on group '{}': color must be >= 0 or kUndefinedColor, got {}", name_, color);
  }
  Activity guard(this, "Split");
  const int n = size();
  std::vector<int32_t> table(static_cast<size_t>(2 * n));
  table[Idx(2 * rank_)] = color;
  table[Idx(2 * rank_ + 1)] = key;
  const uint64_t seq = split_seq_++;
  OpCtx ctx{"Split",   OpKind::kSplit,       HashWords({seq}), static_cast<uint64_t>(2 * n),
            NextTag(), DeadlineFor(0.0, 0.0)};
  if (UseShared()) {  // all-gather of (color, key), as the other collectives on this transport
    const std::vector<int64_t> pairs(static_cast<size_t>(n), 2);
    MOTLEY_RETURN_IF_ERROR(Shared(
        ctx, table.size() * sizeof(int32_t), SharedBuffers{&table[Idx(2 * rank_)], table.data()},
        [&](const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next) {
          SharedAllGatherWork(all, next, pairs, sizeof(int32_t));
        }));
  }
  for (int s = 0; s < n - 1 && !UseShared(); ++s) {  // ring all-gather of (color, key)
    const int cs = Mod(rank_ - s), cr = Mod(rank_ - s - 1);
    MOTLEY_RETURN_IF_ERROR(Exchange(ctx, static_cast<uint32_t>(s), &table[Idx(2 * cs)],
                                    2 * sizeof(int32_t), &table[Idx(2 * cr)], 2 * sizeof(int32_t),
                                    nullptr));
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
  return std::unique_ptr<Communicator>(
      new RingCommunicator(shared_, context, std::move(members), new_rank,
                           fmt::format("{}/split{}.c{}", name_, seq, color)));
}

Result<std::unique_ptr<Communicator>> RingCommunicator::Survivors(std::vector<int>* lost) {
  const std::vector<int> gone = shared_->transport->lost_ranks();
  if (gone.empty()) return Err("Survivors on group '{}': no rank was lost", name_);
  if (lost != nullptr) *lost = gone;
  std::vector<int> members;
  int new_rank = -1;
  for (int world : members_) {
    if (std::find(gone.begin(), gone.end(), world) != gone.end()) continue;
    if (world == members_[Idx(rank_)]) new_rank = static_cast<int>(members.size());
    members.push_back(world);
  }
  if (new_rank < 0) {
    return Err(StatusCode::kUnavailable, "Survivors on group '{}': this rank was declared lost",
               name_);
  }
  std::vector<int64_t> ids(gone.begin(), gone.end());
  const uint64_t context = HashWords({context_, 0x5355525649564FULL /* "SURVIVO" */}, &ids);
  MOTLEY_RETURN_IF_ERROR(shared_->transport->OpenSurvivorContext(context, members)
                             .WithContext(fmt::format("Survivors on group '{}'", name_)));
  return std::unique_ptr<Communicator>(new RingCommunicator(
      shared_, context, std::move(members), new_rank, fmt::format("{}/survivors", name_)));
}

LinkModel RingCommunicator::Link(int dst_world) const {
  const Emulation& e = shared_->emulation;
  if (!e.enabled()) return LinkModel{0.0, std::numeric_limits<double>::infinity()};
  const int src = shared_->transport->world_rank();
  if (e.step != nullptr) return e.links->LinkAt(src, dst_world, *e.step);
  return e.links->link(src, dst_world);
}
std::vector<LinkModel> RingCommunicator::RingLinks() const {
  std::vector<LinkModel> links;
  const Emulation& e = shared_->emulation;
  if (!e.enabled() || size() < 2) return links;
  const int64_t step = e.step != nullptr ? e.step->load() : 0;
  for (int g = 0; g < size(); ++g) {
    const int src = members_[Idx(g)];
    const int dst = members_[Idx(Mod(g + 1))];
    links.push_back(e.step != nullptr ? e.links->LinkAt(src, dst, step) : e.links->link(src, dst));
  }
  return links;
}

// Deadline: max(floor, scale * expected), expected = bytes at the nominal rate plus, on the
// wall clock, the emulated time of the operation.
Transport::Deadline RingCommunicator::DeadlineFor(double moved_bytes, Seconds emulated_s) const {
  const CommOptions& o = shared_->options;
  const Emulation& e = shared_->emulation;
  Seconds expected = moved_bytes / o.nominal_bandwidth_bytes_per_s;
  if (e.enabled() && e.clock->mode() == VirtualClock::Mode::kWall) {
    expected += emulated_s * e.payload_scale;
  }
  const Seconds budget = std::max(o.deadline_floor_s, o.deadline_scale * expected);
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(budget));
}

Status RingCommunicator::Enter(const char* op, std::initializer_list<const Tensor*> tensors,
                               bool reduces) {
  MOTLEY_RETURN_IF_ERROR(
      shared_->transport->abort_status().WithContext(fmt::format("{} on group '{}'", op, name_)));
  MOTLEY_RETURN_IF_ERROR(shared_->transport->context_status(context_).WithContext(
      fmt::format("{} on group '{}'", op, name_)));
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) return Err("{} on group '{}': undefined tensor", op, name_);
    if (!shared_->transport->CanAccess(t->device())) {
      return Err(
          "{} on group '{}': the {} transport cannot access {} memory; stage it through "
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
Status RingCommunicator::CheckCounts(const char* op, const std::vector<int64_t>& counts,
                                     const Tensor& full, const Tensor& part, bool gather) const {
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

Status RingCommunicator::Exchange(const OpCtx& ctx, uint32_t step, const void* send,
                                  size_t send_bytes, void* recv, size_t recv_bytes,
                                  const ReduceSpec* reduce) {
  return ExchangeWith(ctx, step, Mod(rank_ + 1), send, send_bytes, Mod(rank_ - 1), recv, recv_bytes,
                      reduce);
}

// One step: a send to group rank `to` and a receive from `from` (either may be -1), then the wait.
Status RingCommunicator::ExchangeWith(const OpCtx& ctx, uint32_t step, int to, const void* send,
                                      size_t send_bytes, int from, void* recv, size_t recv_bytes,
                                      const ReduceSpec* reduce) {
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
Seconds RingCommunicator::Charge(int dst_world, size_t bytes) {
  const Emulation& e = shared_->emulation;
  if (!e.enabled()) return 0.0;
  Seconds& free_at = shared_->link_free_at[Idx(dst_world)];
  const Seconds start = std::max(e.clock->now(), free_at);
  const double charged = static_cast<double>(bytes) * e.payload_scale;
  const Seconds wire = Link(dst_world).TransferTime(charged);
  free_at = start + wire;
  if (e.traffic != nullptr && Idx(dst_world) < e.traffic->bytes.size()) {
    e.traffic->bytes[Idx(dst_world)] += charged;
    e.traffic->transfers[Idx(dst_world)] += 1;
    e.traffic->seconds[Idx(dst_world)] += wire;
  }
  return free_at;
}
void RingCommunicator::Arrive(Seconds arrival_s) {
  const Emulation& e = shared_->emulation;
  if (e.enabled()) e.clock->AdvanceTo(arrival_s);
}

Result<Request> RingCommunicator::PostP2p(Tensor& data, int peer, int tag, bool is_send) {
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
    return Err("{} on group '{}': tag {} with peer {} is already in use by a pending {}", op, name_,
               tag, peer, op);
  }
  Transport& tp = *shared_->transport;
  Envelope env{static_cast<uint32_t>(OpKind::kSend),
               0,
               data.bytes(),
               static_cast<uint64_t>(data.numel()),
               HashWords({static_cast<uint64_t>(data.dtype())}),
               0.0};
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

}  // namespace internal

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
    return Err(
        "comm options: deadline_floor_s, deadline_scale and nominal_bandwidth_bytes_per_s "
        "must be > 0");
  }
  using internal::RankShared;
  using internal::RingCommunicator;
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
