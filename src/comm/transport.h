// Transport: the point-to-point layer under the ring engine (ring_communicator.h). Backends (local
// threads, MPI) implement it; collectives, link emulation, deadlines and misuse checks live above
// it, once. Internal to comm.
//
// Messages are matched by (source world rank, context, tag) in posting order (non-overtaking).
// Every message carries an Envelope; the receiver posts the envelope it expects and a mismatch in
// kind, byte count or meta fails both sides. Ownership: buffers belong to the caller and must stay
// valid until the request completed or WaitAll returned an error (requests are then cancelled).
// Thread safety: one Transport object per rank, used by that rank's thread; Abort from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "tensor/tensor.h"

namespace motley::comm {

// What a message says about itself. kind names the operation (OpKind), meta hashes the operation's
// arguments (counts, root, reduce op) so that ranks calling different operations are caught.
struct Envelope {
  uint32_t kind = 0;
  uint32_t step = 0;
  uint64_t bytes = 0;
  uint64_t total = 0;  // the operation's element count (the whole tensor, not this message)
  uint64_t meta = 0;
  double arrival_s = 0.0;  // virtual time at which the message reaches the receiver
};

enum class OpKind : uint32_t {
  kSend = 1,
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kBarrier,
  kSplit
};
const char* OpKindName(uint32_t kind);

struct ReduceSpec {
  tensor::DType dtype = tensor::DType::kF32;
  ReduceOp op = ReduceOp::kSum;
};

// One posted send or receive. Backends derive from it; the fields below are filled by them.
class TransportRequest {
 public:
  virtual ~TransportRequest() = default;
  bool is_send = false;
  int peer = -1;      // world rank
  Envelope envelope;  // sent, or (after completion) received
};
using TransportRequestPtr = std::shared_ptr<TransportRequest>;

// Context for error messages of a wait.
struct WaitInfo {
  const char* op = "";
  const std::string* group = nullptr;
  const std::vector<int>* members = nullptr;  // group rank -> world rank
};

// The buffers one rank contributes to a shared-memory collective (either may be null).
struct SharedBuffers {
  const void* in = nullptr;
  void* out = nullptr;
};
// Runs on every member once all members posted; gets every member's buffers by group rank and a
// counter shared by the members (starts at 0) to hand out pieces of work dynamically.
using SharedWork =
    std::function<void(const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next)>;

class Transport {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  virtual ~Transport() = default;

  virtual int world_rank() const = 0;
  virtual int world_size() const = 0;
  virtual const char* backend_name() const = 0;
  // Whether this transport may read and write memory of `device` directly.
  virtual bool CanAccess(const tensor::Device& device) const = 0;

  virtual Result<TransportRequestPtr> PostSend(int dst, uint64_t context, int64_t tag,
                                               const void* data, const Envelope& envelope) = 0;
  // With `reduce`, the incoming data is combined into `data` (data = op(data, incoming)).
  virtual Result<TransportRequestPtr> PostRecv(int src, uint64_t context, int64_t tag, void* data,
                                               const Envelope& expect,
                                               const ReduceSpec* reduce) = 0;
  // Waits until every request completed. On any error (mismatch, deadline, abort, lost peer) it
  // cancels the unfinished requests before returning, so the caller may free the buffers.
  virtual Status WaitAll(const std::vector<TransportRequestPtr>& requests, Deadline deadline,
                         const WaitInfo& info) = 0;
  // Collective over `members` (world ranks, ascending group order) before a context is used.
  virtual Status CreateContext(uint64_t /*context*/, const std::vector<int>& /*members*/) {
    return Status::Ok();
  }
  // Whether SharedCollective is available (ranks share one address space, e.g. local threads).
  virtual bool has_shared_memory() const { return false; }
  // A shared-memory collective over `members` (world ranks; this rank is members[group_rank]),
  // keyed by (context, tag) like a message. Every member posts its envelope and buffers; a
  // mismatch in kind, element count or meta fails every member with a message naming both
  // ranks. Once all posted, `work` runs on every member (outside any lock) and the call returns
  // when every member finished its work, so no peer touches this rank's buffers after it returned.
  // Before all posted, a wait fails as WaitAll's do (deadline, abort, lost peer) and withdraws the
  // buffers. `work` must be bounded (no waits): after the start every member waits for the others
  // to finish it, ignoring deadlines and aborts.
  virtual Status SharedCollective(uint64_t /*context*/, int64_t /*tag*/,
                                  const std::vector<int>& /*members*/, int /*group_rank*/,
                                  const Envelope& /*envelope*/, SharedBuffers /*mine*/,
                                  const SharedWork& /*work*/, Deadline /*deadline*/,
                                  const WaitInfo& /*info*/) {
    return Err("{} transport has no shared-memory collectives", backend_name());
  }
  // Marks this rank's activity for liveness reports ("" when it leaves a call).
  virtual void SetActivity(const std::string& /*what*/) {}
  virtual void Abort(const std::string& reason) = 0;
  // Non-ok once any rank aborted.
  virtual Status abort_status() const = 0;

  // Liveness (transports with heartbeats, mpi): the world ranks found silent here or reported
  // lost by a peer, ascending; empty while none is.
  virtual std::vector<int> lost_ranks() const { return {}; }
  // Non-ok (kUnavailable, naming the lost rank) for a context opened before a peer was lost:
  // every operation on it fails. Survivor contexts (OpenSurvivorContext) stay usable.
  virtual Status context_status(uint64_t /*context*/) const { return Status::Ok(); }
  // After a loss: a context over `members` (world ranks of survivors, ascending), on a channel
  // kept for it, set up locally (no collective, so no survivor can hang on a lost rank).
  virtual Status OpenSurvivorContext(uint64_t /*context*/, const std::vector<int>& /*members*/) {
    return Err("the {} transport has no liveness (no lost ranks to leave out)", backend_name());
  }
};

// Combines `bytes` of incoming data into dst: dst[i] = op(dst[i], src[i]).
Status ReduceInto(void* dst, const void* src, size_t bytes, const ReduceSpec& spec);
// Checks that the envelope a receiver expects matches the one the sender sent.
Status CheckEnvelope(const Envelope& expect, const Envelope& got, int src_world);
// Formats "group 'g' rank r (world w)" for messages.
std::string DescribePeer(const WaitInfo& info, int world_rank);

}  // namespace motley::comm
