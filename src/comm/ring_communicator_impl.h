// Internal to comm: the RingCommunicator class behind MakeRingWorld (ring_communicator.h), split
// by purpose over ring_communicator.cc (argument checks, deadlines, transfers on the virtual
// clock, point-to-point, Split) and ring_collectives.cc (the collective algorithms: ring or
// chain over point-to-point transfers, or the shared-memory path of shared_collectives.h).
// Ownership and thread safety: as communicator.h; RankShared is shared by a rank's world
// communicator and every subgroup split from it (all used by that rank's thread).
#pragma once

#include <chrono>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "comm/link_model.h"
#include "comm/transport.h"

namespace motley::comm::internal {

// Per rank, shared by the world communicator and every subgroup split from it.
struct RankShared {
  std::shared_ptr<Transport> transport;
  CommOptions options;
  Emulation emulation;
  std::vector<Seconds> link_free_at;  // per destination world rank (sender's outgoing links)
};

// FNV-1a over 64-bit words (the meta of an envelope).
uint64_t HashWords(std::initializer_list<uint64_t> words,
                   const std::vector<int64_t>* extra = nullptr);

struct OpCtx {
  const char* name;
  OpKind kind;
  uint64_t meta;
  uint64_t total;
  int64_t tag;
  Transport::Deadline deadline;
};

class RingCommunicator final : public Communicator {
 public:
  RingCommunicator(std::shared_ptr<RankShared> shared, uint64_t context, std::vector<int> members,
                   int rank, std::string name);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::string& name() const override { return name_; }

  // ring_collectives.cc
  Status AllReduce(tensor::Tensor& data, ReduceOp op) override;
  Status ReduceScatter(tensor::Tensor& out, const tensor::Tensor& in,
                       const std::vector<int64_t>& counts, ReduceOp op) override;
  Status AllGather(tensor::Tensor& out, const tensor::Tensor& in,
                   const std::vector<int64_t>& counts) override;
  Status Broadcast(tensor::Tensor& data, int root) override;
  Status Barrier() override;

  // ring_communicator.cc
  Status Send(const tensor::Tensor& data, int peer, int tag) override;
  Status Recv(tensor::Tensor& data, int peer, int tag) override;
  Result<Request> ISend(const tensor::Tensor& data, int peer, int tag) override;
  Result<Request> IRecv(tensor::Tensor& data, int peer, int tag) override;
  Status Wait(Request& request) override;
  void Abort(const std::string& reason) override;
  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;
  Result<std::unique_ptr<Communicator>> Survivors(std::vector<int>* lost) override;

 private:
  // Marks this rank busy in `op` for liveness reports, until the end of the scope.
  struct Activity {
    Activity(RingCommunicator* c, const char* op);
    ~Activity();
    RingCommunicator* comm;
  };

  static size_t Idx(int i) { return static_cast<size_t>(i); }
  int Mod(int i) const { return ((i % size()) + size()) % size(); }
  static std::vector<int64_t> Offsets(const std::vector<int64_t>& counts);
  int64_t NextTag() { return kMaxUserTag + 1 + static_cast<int64_t>(coll_seq_++ % (1U << 30)); }

  LinkModel Link(int dst_world) const;
  std::vector<LinkModel> RingLinks() const;
  // Deadline: max(floor, scale * expected), expected = bytes at the nominal rate plus, on the
  // wall clock, the emulated time of the operation.
  Transport::Deadline DeadlineFor(double moved_bytes, Seconds emulated_s) const;

  Status Enter(const char* op, std::initializer_list<const tensor::Tensor*> tensors, bool reduces);
  // full (sum(counts)) and part (counts[rank]) of a ReduceScatter (full = in) or AllGather.
  Status CheckCounts(const char* op, const std::vector<int64_t>& counts, const tensor::Tensor& full,
                     const tensor::Tensor& part, bool gather) const;

  // Whether collectives take the shared-memory path: the transport shares one address space and
  // no link emulation is on (emulated collectives must run as rings over charged transfers).
  bool UseShared() const;
  // The shared-memory rendezvous of one collective (see Transport::SharedCollective).
  Status Shared(const OpCtx& ctx, uint64_t bytes, SharedBuffers mine, const SharedWork& work);

  Status Exchange(const OpCtx& ctx, uint32_t step, const void* send, size_t send_bytes, void* recv,
                  size_t recv_bytes, const ReduceSpec* reduce);
  // One step: a send to group rank `to` and a receive from `from` (either may be -1), then the
  // wait.
  Status ExchangeWith(const OpCtx& ctx, uint32_t step, int to, const void* send, size_t send_bytes,
                      int from, void* recv, size_t recv_bytes, const ReduceSpec* reduce);
  // Virtual time at which `bytes` sent now to `dst_world` arrive; books the sender's link.
  Seconds Charge(int dst_world, size_t bytes);
  void Arrive(Seconds arrival_s);

  Result<Request> PostP2p(tensor::Tensor& data, int peer, int tag, bool is_send);

  std::shared_ptr<RankShared> shared_;
  uint64_t context_;
  std::vector<int> members_;  // group rank -> world rank
  int rank_;
  std::string name_;
  uint64_t coll_seq_ = 0;
  uint64_t split_seq_ = 0;
  std::set<std::tuple<int, int, bool>> pending_;
  std::vector<double> scratch_[2];  // the ring ReduceScatter's ping-pong chunk buffers
};

}  // namespace motley::comm::internal
