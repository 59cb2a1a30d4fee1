// See local_world.h. The transport under the ring engine for ranks that are threads.
#include "comm/local_world.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include <fmt/core.h>

#include "comm/ring_communicator.h"
#include "comm/transport.h"

namespace motley::comm {

namespace {

using Clock = std::chrono::steady_clock;

enum class ReqState { kQueued, kMatched, kCopying, kDone, kCancelled };

struct LocalRequest : TransportRequest {
  int owner = -1;
  int src = -1;
  int dst = -1;
  uint64_t context = 0;
  int64_t tag = 0;
  const void* send_data = nullptr;
  void* recv_data = nullptr;
  Envelope expect;
  bool has_reduce = false;
  ReduceSpec reduce;
  ReqState state = ReqState::kQueued;
  std::shared_ptr<LocalRequest> match;
  Status error;
};
using LocalRequestPtr = std::shared_ptr<LocalRequest>;

struct Endpoint {
  std::condition_variable cv;
  std::deque<LocalRequestPtr> unexpected;  // sends to this rank not yet matched
  std::deque<LocalRequestPtr> posted;      // receives of this rank not yet matched
  bool connected = false;
  bool closed = false;
  std::string activity;
  Clock::time_point last_active = Clock::now();
};

// One shared-memory collective in flight (Transport::SharedCollective), keyed by (context, tag).
struct SharedOp {
  explicit SharedOp(size_t n) : buffers(n), posted(n, false) {}
  std::vector<SharedBuffers> buffers;  // by group rank
  std::vector<bool> posted;
  int posted_count = 0;
  int finished_count = 0;
  int left_count = 0;
  bool started = false;
  std::atomic<uint64_t> next{0};  // the members' shared work counter
  int first_world = -1;  // the first rank that posted, and its envelope
  Envelope first;
  Status error;          // set once the op failed; sticky for late arrivals
};

}  // namespace

class LocalWorldState {
 public:
  LocalWorldState(int size, LocalWorldOptions options)
      : options_(std::move(options)), endpoints_(static_cast<size_t>(size)) {}
  std::mutex mu;
  LocalWorldOptions options_;
  std::vector<Endpoint> endpoints_;
  bool aborted = false;
  std::string abort_reason;
  std::map<std::pair<uint64_t, int64_t>, std::shared_ptr<SharedOp>> shared_ops;

  Endpoint& ep(int rank) { return endpoints_[static_cast<size_t>(rank)]; }
  int size() const { return static_cast<int>(endpoints_.size()); }
  void Abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted) return;
    aborted = true;
    abort_reason = reason;
    for (Endpoint& e : endpoints_) e.cv.notify_all();
  }
};

namespace {

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<LocalWorldState> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  ~LocalTransport() override {
    std::unique_lock<std::mutex> lock(state_->mu);
    CancelLocked(lock, outstanding_, Status::Error(fmt::format("world rank {} left", rank_)));
    Endpoint& me = state_->ep(rank_);
    me.closed = true;
    me.activity.clear();
    for (Endpoint& e : state_->endpoints_) e.cv.notify_all();
  }

  int world_rank() const override { return rank_; }
  int world_size() const override { return state_->size(); }
  const char* backend_name() const override { return "local"; }
  bool CanAccess(const tensor::Device& device) const override {
    const auto& kinds = state_->options_.accessible;
    return std::find(kinds.begin(), kinds.end(), device.kind) != kinds.end();
  }

  Result<TransportRequestPtr> PostSend(int dst, uint64_t context, int64_t tag, const void* data,
                                       const Envelope& envelope) override {
    auto req = std::make_shared<LocalRequest>();
    req->is_send = true;
    req->peer = dst;
    req->owner = rank_;
    req->src = rank_;
    req->dst = dst;
    req->context = context;
    req->tag = tag;
    req->send_data = data;
    req->envelope = envelope;
    std::lock_guard<std::mutex> lock(state_->mu);
    MOTLEY_RETURN_IF_ERROR(UsableLocked(dst));
    Endpoint& peer = state_->ep(dst);
    auto it = std::find_if(peer.posted.begin(), peer.posted.end(), [&](const LocalRequestPtr& r) {
      return r->src == rank_ && r->context == context && r->tag == tag;
    });
    if (it != peer.posted.end()) {
      Pair(req, *it);
      peer.posted.erase(it);
      peer.cv.notify_all();
    } else {
      peer.unexpected.push_back(req);
    }
    Track(req);
    return TransportRequestPtr(req);
  }

  Result<TransportRequestPtr> PostRecv(int src, uint64_t context, int64_t tag, void* data,
                                       const Envelope& expect, const ReduceSpec* reduce) override {
    auto req = std::make_shared<LocalRequest>();
    req->is_send = false;
    req->peer = src;
    req->owner = rank_;
    req->src = src;
    req->dst = rank_;
    req->context = context;
    req->tag = tag;
    req->recv_data = data;
    req->expect = expect;
    if (reduce != nullptr) {
      req->has_reduce = true;
      req->reduce = *reduce;
    }
    std::lock_guard<std::mutex> lock(state_->mu);
    MOTLEY_RETURN_IF_ERROR(UsableLocked(src));
    Endpoint& me = state_->ep(rank_);
    auto it = std::find_if(me.unexpected.begin(), me.unexpected.end(),
                           [&](const LocalRequestPtr& s) {
                             return s->src == src && s->context == context && s->tag == tag;
                           });
    if (it != me.unexpected.end()) {
      Pair(*it, req);
      me.unexpected.erase(it);
    } else {
      me.posted.push_back(req);
    }
    Track(req);
    return TransportRequestPtr(req);
  }

  Status WaitAll(const std::vector<TransportRequestPtr>& requests, Deadline deadline,
                 const WaitInfo& info) override {
    std::vector<LocalRequestPtr> reqs;
    reqs.reserve(requests.size());
    for (const auto& r : requests) reqs.push_back(std::static_pointer_cast<LocalRequest>(r));
    std::unique_lock<std::mutex> lock(state_->mu);
    Endpoint& me = state_->ep(rank_);
    for (;;) {
      Status error;
      bool all_done = true;
      bool progressed = false;
      // Progress every matched receive of this rank, not only the awaited ones (a posted IRecv
      // must complete while its owner blocks in a Send, as MPI's progress rule requires).
      for (size_t k = 0; k < outstanding_.size() && error.ok(); ++k) {
        LocalRequestPtr r = outstanding_[k].lock();
        if (!r || r->is_send || r->state != ReqState::kMatched) continue;
        Status copied = CopyLocked(lock, r);
        progressed = true;
        if (!copied.ok() && std::find(reqs.begin(), reqs.end(), r) != reqs.end()) error = copied;
      }
      for (const LocalRequestPtr& r : reqs) {
        if (!error.ok()) break;
        if (r->state == ReqState::kDone) continue;
        if (r->state == ReqState::kCancelled) {
          error = r->error;
          break;
        }
        all_done = false;
      }
      if (!error.ok()) return Fail(lock, reqs, error, info);
      if (all_done) return Status::Ok();
      if (progressed) continue;
      if (state_->aborted) {
        return Fail(lock, reqs, Err("aborted: {}", state_->abort_reason), info);
      }
      for (const LocalRequestPtr& r : reqs) {
        if (r->state != ReqState::kDone && state_->ep(r->peer).closed) {
          return Fail(lock, reqs,
                      Err("peer lost: {} left the world (its communicators were destroyed)",
                          DescribePeer(info, r->peer)),
                      info);
        }
      }
      const auto now = Clock::now();
      me.last_active = now;
      if (now >= deadline) return Fail(lock, reqs, TimeoutLocked(reqs, info, now), info);
      me.cv.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)));
    }
  }

  void SetActivity(const std::string& what) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    Endpoint& me = state_->ep(rank_);
    me.activity = what;
    me.last_active = Clock::now();
  }

  void Abort(const std::string& reason) override {
    state_->Abort(fmt::format("world rank {} called Abort: {}", rank_, reason));
  }
  Status abort_status() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->aborted) return Status::Ok();
    return Err("aborted: {}", state_->abort_reason);
  }

  bool has_shared_memory() const override { return true; }

  Status SharedCollective(uint64_t context, int64_t tag, const std::vector<int>& members,
                          int group_rank, const Envelope& envelope, SharedBuffers mine,
                          const SharedWork& work, Deadline deadline,
                          const WaitInfo& info) override {
    const auto key = std::make_pair(context, tag);
    const size_t n = members.size();
    const auto g = static_cast<size_t>(group_rank);
    std::unique_lock<std::mutex> lock(state_->mu);
    auto fail = [&](const Status& error) {
      return error.WithContext(fmt::format("{} on group '{}'", info.op,
                                           info.group != nullptr ? *info.group : std::string("?")));
    };
    if (state_->aborted) return fail(Err("aborted: {}", state_->abort_reason));
    std::shared_ptr<SharedOp>& slot = state_->shared_ops[key];
    if (slot == nullptr) slot = std::make_shared<SharedOp>(n);
    std::shared_ptr<SharedOp> op = slot;
    auto leave = [&] {  // the last member out forgets the op (a failed one stays for late ranks)
      if (++op->left_count == static_cast<int>(n) && op->error.ok()) state_->shared_ops.erase(key);
    };
    auto wake = [&] {
      for (int w : members) state_->ep(w).cv.notify_all();
    };
    if (!op->error.ok()) {
      leave();
      return fail(op->error);
    }
    if (op->first_world < 0) {
      op->first_world = rank_;
      op->first = envelope;
    } else {
      Status mismatch = SharedMismatch(op->first, op->first_world, envelope);
      if (!mismatch.ok()) {
        op->error = mismatch;
        wake();
        leave();
        return fail(mismatch);
      }
    }
    op->buffers[g] = mine;
    op->posted[g] = true;
    if (++op->posted_count == static_cast<int>(n)) {
      op->started = true;
      wake();
    }
    Endpoint& me = state_->ep(rank_);
    while (!op->started) {
      Status error = op->error;
      if (error.ok() && state_->aborted) error = Err("aborted: {}", state_->abort_reason);
      for (size_t k = 0; k < n && error.ok(); ++k) {
        if (!op->posted[k] && state_->ep(members[k]).closed) {
          error = Err("peer lost: {} left the world (its communicators were destroyed)",
                      DescribePeer(info, members[k]));
        }
      }
      const auto now = Clock::now();
      me.last_active = now;
      if (error.ok() && now >= deadline) {
        int silent = rank_;
        for (size_t k = 0; k < n; ++k) {
          if (!op->posted[k]) {
            silent = members[k];
            break;
          }
        }
        error = Err("deadline passed waiting for {}: {}", DescribePeer(info, silent),
                    LivenessLocked(silent, now));
      }
      if (!error.ok()) {  // withdraw: nobody has read our buffers (the op never started)
        op->posted[g] = false;
        --op->posted_count;
        if (op->error.ok()) {
          op->error = Err("world rank {} withdrew from it: {}", rank_, error.message());
        }
        wake();
        leave();
        return fail(error);
      }
      me.cv.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)));
    }
    lock.unlock();
    work(op->buffers, op->next);
    lock.lock();
    if (++op->finished_count == static_cast<int>(n)) wake();
    // Peers may still read or write our buffers: wait for them whatever happens (their work is
    // bounded; returning earlier would let them touch memory the caller may free).
    while (op->finished_count < static_cast<int>(n)) me.cv.wait(lock);
    me.last_active = Clock::now();
    leave();
    return Status::Ok();
  }

 private:
  // A mismatch between the first poster's envelope and `got` of this rank, naming both ranks.
  Status SharedMismatch(const Envelope& first, int first_world, const Envelope& got) const {
    if (first.kind != got.kind) {
      return Err("operation mismatch: world rank {} called {} while world rank {} called {}",
                 first_world, OpKindName(first.kind), rank_, OpKindName(got.kind));
    }
    if (first.total != got.total || first.bytes != got.bytes) {
      return Err("size mismatch in {}: world rank {} passed {} elements ({} bytes), world rank {} "
                 "passed {} ({} bytes)",
                 OpKindName(first.kind), first_world, first.total, first.bytes, rank_, got.total,
                 got.bytes);
    }
    if (first.meta != got.meta) {
      return Err("argument mismatch in {}: world rank {} passed other counts, root, dtype or "
                 "reduce op than world rank {}",
                 OpKindName(first.kind), first_world, rank_);
    }
    return Status::Ok();
  }

  Status UsableLocked(int peer) {
    if (state_->aborted) return Err("aborted: {}", state_->abort_reason);
    if (peer < 0 || peer >= state_->size()) {
      return Err("world rank {} out of range [0, {})", peer, state_->size());
    }
    if (state_->ep(peer).closed) return Err("peer lost: world rank {} left the world", peer);
    return Status::Ok();
  }

  static void Pair(const LocalRequestPtr& send, const LocalRequestPtr& recv) {
    send->match = recv;
    recv->match = send;
    send->state = ReqState::kMatched;
    recv->state = ReqState::kMatched;
  }

  void Track(const LocalRequestPtr& r) {
    std::erase_if(outstanding_, [](const std::weak_ptr<LocalRequest>& w) {
      auto p = w.lock();
      return !p || p->state == ReqState::kDone || p->state == ReqState::kCancelled;
    });
    outstanding_.push_back(r);
  }

  // Receiver side: checks the envelope, copies or reduces from the sender's buffer (without the
  // lock), completes both requests and wakes the sender.
  Status CopyLocked(std::unique_lock<std::mutex>& lock, const LocalRequestPtr& recv) {
    LocalRequestPtr send = recv->match;
    Status check = CheckEnvelope(recv->expect, send->envelope, send->src);
    if (!check.ok()) {
      send->error = Err("world rank {} rejected the message: {}", rank_, check.message());
      send->state = ReqState::kCancelled;
      recv->state = ReqState::kCancelled;
      recv->error = check;
      send->match.reset();
      recv->match.reset();
      state_->ep(send->owner).cv.notify_all();
      return check;
    }
    send->state = ReqState::kCopying;
    const size_t bytes = send->envelope.bytes;
    lock.unlock();
    Status copied;
    if (bytes > 0) {
      if (recv->has_reduce) {
        copied = ReduceInto(recv->recv_data, send->send_data, bytes, recv->reduce);
      } else {
        std::memcpy(recv->recv_data, send->send_data, bytes);
      }
    }
    lock.lock();
    recv->envelope = send->envelope;
    if (copied.ok()) {
      send->state = ReqState::kDone;
      recv->state = ReqState::kDone;
    } else {
      send->error = copied;
      send->state = ReqState::kCancelled;
      recv->error = copied;
      recv->state = ReqState::kCancelled;
    }
    send->match.reset();
    recv->match.reset();
    state_->ep(send->owner).cv.notify_all();
    return copied;
  }

  Status TimeoutLocked(const std::vector<LocalRequestPtr>& reqs, const WaitInfo& info,
                       Clock::time_point now) {
    int silent = -1;
    for (const LocalRequestPtr& r : reqs) {
      if (r->state != ReqState::kDone) {
        silent = r->peer;
        break;
      }
    }
    return Err("deadline passed waiting for {}: {}", DescribePeer(info, silent),
               LivenessLocked(silent, now));
  }

  // What world rank `peer` is doing, for a deadline message.
  std::string LivenessLocked(int peer, Clock::time_point now) {
    const Endpoint& e = state_->ep(peer);
    const double idle = std::chrono::duration<double>(now - e.last_active).count();
    if (!e.connected) return "it never connected";
    if (e.activity.empty()) {
      return fmt::format("it is alive but made no communicator call for {:.2f} s (slow or stuck "
                         "outside the communicator)",
                         idle);
    }
    return fmt::format("it is alive, waiting in {} (last active {:.2f} s ago)", e.activity, idle);
  }

  // Cancels every unfinished request so that no peer touches their buffers after we return.
  void CancelLocked(std::unique_lock<std::mutex>& lock, std::vector<std::weak_ptr<LocalRequest>> list,
                    const Status& why) {
    for (const auto& w : list) {
      LocalRequestPtr r = w.lock();
      if (!r) continue;
      CancelOneLocked(lock, r, why);
    }
  }
  void CancelOneLocked(std::unique_lock<std::mutex>& lock, const LocalRequestPtr& r,
                       const Status& why) {
    Endpoint& me = state_->ep(rank_);
    while (r->is_send && r->state == ReqState::kCopying) me.cv.wait(lock);  // a bounded memcpy
    if (r->state == ReqState::kQueued) {
      auto& q = r->is_send ? state_->ep(r->dst).unexpected : me.posted;
      q.erase(std::remove(q.begin(), q.end(), r), q.end());
    } else if (r->state == ReqState::kMatched) {
      LocalRequestPtr other = r->match;
      other->state = ReqState::kCancelled;
      other->error = Err("world rank {} withdrew its {}: {}", rank_,
                         r->is_send ? "send" : "receive", why.message());
      other->match.reset();
      state_->ep(other->owner).cv.notify_all();
    }
    if (r->state != ReqState::kDone && r->state != ReqState::kCancelled) {
      r->state = ReqState::kCancelled;
      if (r->error.ok()) r->error = why;
    }
    r->match.reset();
  }

  Status Fail(std::unique_lock<std::mutex>& lock, const std::vector<LocalRequestPtr>& reqs,
              const Status& error, const WaitInfo& info) {
    for (const LocalRequestPtr& r : reqs) CancelOneLocked(lock, r, error);
    return error.WithContext(fmt::format("{} on group '{}'", info.op,
                                         info.group != nullptr ? *info.group : std::string("?")));
  }

  std::shared_ptr<LocalWorldState> state_;
  int rank_;
  std::vector<std::weak_ptr<LocalRequest>> outstanding_;
};

}  // namespace

LocalWorld::LocalWorld(std::shared_ptr<LocalWorldState> state) : state_(std::move(state)) {}
LocalWorld::~LocalWorld() = default;

std::shared_ptr<LocalWorld> LocalWorld::Create(int size, LocalWorldOptions options) {
  MOTLEY_CHECK(size > 0, "LocalWorld needs at least one rank");
  return std::shared_ptr<LocalWorld>(
      new LocalWorld(std::make_shared<LocalWorldState>(size, std::move(options))));
}

int LocalWorld::size() const { return state_->size(); }

Result<std::unique_ptr<Communicator>> LocalWorld::Connect(int rank, CommOptions options,
                                                          Emulation emulation) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (rank < 0 || rank >= state_->size()) {
      return Err("LocalWorld::Connect: rank {} out of range [0, {})", rank, state_->size());
    }
    Endpoint& e = state_->ep(rank);
    if (e.connected) return Err("LocalWorld::Connect: rank {} connected twice", rank);
    e.connected = true;
    e.last_active = Clock::now();
  }
  return MakeRingWorld(std::make_shared<LocalTransport>(state_, rank), options, emulation);
}

void LocalWorld::Abort(const std::string& reason) {
  state_->Abort(fmt::format("LocalWorld::Abort: {}", reason));
}

}  // namespace motley::comm
