// comm::Communicator: the one API for collectives, point-to-point and barrier over a group of ranks
// (docs/architecture.md §7). Backends: local (ranks are threads, local_world.h), mpi (mpi_world.h,
// when built with MPI), hierarchical (a mixed-kind group, hierarchical.h). Link emulation and the
// virtual clock (link_model.h) apply to every backend built on the ring engine (local and mpi).
//
// Contract, for every backend:
// - Ownership: a Communicator owns nothing the caller passes. Tensors must stay alive and unchanged
//   (sends) or untouched (receives) until the call returns, or, for ISend/IRecv, until Wait
//   returns. A Communicator returned by Split is owned by the caller; it may outlive its parent.
// - Thread safety: one Communicator object is used by one thread (its rank's thread) at a time.
//   Different Communicator objects (other ranks, or subgroups) may be used concurrently.
// - Blocking: every call blocks until the operation completed on this rank (collectives are not
//   stream-ordered). Every rank of the group must call the same collectives in the same order with
//   matching arguments. Every blocking wait has a deadline: max(deadline_floor_s, deadline_scale x
//   the operation's expected time); on expiry it returns an error that names the operation, the
//   group and the rank it was waiting for, and says whether that rank is alive (slow) or silent.
// - Failures are Status, never a crash or a hang: timeouts, lost peers, Abort() by any rank,
//   mismatched sizes or operations across ranks, a peer out of range, a (peer, tag) used twice at
//   once, an unsupported dtype or an inaccessible device tensor.
// - Abort(reason) releases every rank of the whole world that is waiting or will wait: their calls
//   return an error quoting the reason. It is sticky: the world cannot be used afterwards.
// - Liveness (mpi): a peer silent for CommOptions::silence_timeout_s is lost. The rank that finds
//   it tells every other rank, and from then on every operation of every communicator opened
//   before fails with kUnavailable, naming the lost world rank, on every survivor. Survivors()
//   then gives the survivors a communicator of their own (e.g. to save what they hold).
// - Data: tensors are contiguous; reductions support f32, f64 and i32; copies support every dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/even_counts.h"
#include "core/sanitized_build.h"
#include "core/status.h"
#include "core/units.h"
#include "tensor/tensor.h"

namespace motley::comm {

enum class ReduceOp : uint8_t { kSum, kMax };
const char* ReduceOpName(ReduceOp op);

// Passed to Split by ranks that join no new group.
inline constexpr int kUndefinedColor = -1;
// User tags of Send/Recv are in [0, kMaxUserTag].
inline constexpr int kMaxUserTag = (1 << 20) - 1;

struct CommOptions {
  // Deadline of a blocking call: max(deadline_floor_s, deadline_scale * expected time). The floor
  // is 60 s in the ASan/UBSan build (core/sanitized_build.h), which runs every op many times
  // slower: a healthy rank busy outside the communicator there (a checkpoint write on a loaded
  // machine) took 9.85 s, past the 10 s a hang needs to be told from work in the main build.
  Seconds deadline_floor_s = kSanitizedBuild ? 60.0 : 10.0;
  double deadline_scale = 10.0;
  // Rate used for the expected time of a transfer that is not emulated (a conservative host copy
  // or TCP rate, so that a healthy transfer never comes near its deadline).
  BytesPerSecond nominal_bandwidth_bytes_per_s = 1e9;
  // mpi: how often each process announces it is alive, and after how long without any news a
  // peer counts as silent (a silent peer fails the wait at once instead of at the deadline).
  Seconds heartbeat_interval_s = 0.25;
  Seconds silence_timeout_s = 5.0;
};

// Elements per rank for splitting `total` elements over `n` ranks (core/even_counts.h), the
// layout AllReduce uses internally.
using ::motley::EvenCounts;

// Handle of a non-blocking ISend/IRecv; complete it with Communicator::Wait. Move-only.
class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
};
class Request {
 public:
  Request() = default;
  explicit Request(std::unique_ptr<RequestImpl> impl) : impl_(std::move(impl)) {}
  bool valid() const { return impl_ != nullptr; }
  RequestImpl* impl() const { return impl_.get(); }
  void reset() { impl_.reset(); }

 private:
  std::unique_ptr<RequestImpl> impl_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "world", "world/split0.c1", ...: used in error messages.
  virtual const std::string& name() const = 0;

  // data (any shape, numel E) = reduction over ranks of data, in place.
  virtual Status AllReduce(tensor::Tensor& data, ReduceOp op) = 0;
  // in (sum(counts)) on every rank; out (counts[rank]) = reduction of the rank's slice of `in`.
  // counts (size() entries, each >= 0, zeros allowed) must be equal on every rank.
  virtual Status ReduceScatter(tensor::Tensor& out, const tensor::Tensor& in,
                               const std::vector<int64_t>& counts, ReduceOp op) = 0;
  // in (counts[rank]) on every rank; out (sum(counts)) = the ranks' inputs in rank order.
  virtual Status AllGather(tensor::Tensor& out, const tensor::Tensor& in,
                           const std::vector<int64_t>& counts) = 0;
  // data (same numel on every rank) = root's data.
  virtual Status Broadcast(tensor::Tensor& data, int root) = 0;

  // Tagged point-to-point. Sizes and dtypes must match between the two sides. Messages between
  // two ranks with the same tag are received in the order they were sent. Send may wait for the
  // matching Recv (rendezvous): two ranks that both Send first deadlock until their deadline.
  virtual Status Send(const tensor::Tensor& data, int peer, int tag) = 0;
  virtual Status Recv(tensor::Tensor& data, int peer, int tag) = 0;
  // Non-blocking forms: at most one pending ISend and one pending IRecv per (peer, tag).
  virtual Result<Request> ISend(const tensor::Tensor& data, int peer, int tag) = 0;
  virtual Result<Request> IRecv(tensor::Tensor& data, int peer, int tag) = 0;
  virtual Status Wait(Request& request) = 0;

  virtual Status Barrier() = 0;
  // See the contract above. Safe to call from any thread.
  virtual void Abort(const std::string& reason) = 0;

  // Collective over this group (as MPI_Comm_split): ranks with the same color form a new group,
  // ordered by (key, rank). A rank passing kUndefinedColor gets a null communicator. Groups are
  // rebuilt when a plan changes by splitting the world communicator again.
  virtual Result<std::unique_ptr<Communicator>> Split(int color, int key) = 0;

  // After a liveness failure: a communicator over this group's members that are not lost (group
  // order kept, ranks renumbered; the lost world ranks go to *lost). Local: each survivor calls
  // it, no message is exchanged. Errors when no peer was lost or the backend has no liveness.
  virtual Result<std::unique_ptr<Communicator>> Survivors(std::vector<int>* lost) {
    (void)lost;
    return Err("Survivors on group '{}': this backend has no liveness", name());
  }
};

}  // namespace motley::comm
