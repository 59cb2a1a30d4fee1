// StagedCommunicator: lets a rank whose tensors live in device memory (a CUDA stage) use a host
// communicator (local threads or mpi; neither reads device memory, and Debian's Open MPI is not
// CUDA-aware). Every tensor that is not host-addressable is copied to a host tensor of the same
// shape and dtype before a send or collective and back after a receive or collective (through
// the rank's Backend); host tensors pass through untouched. Peers see ordinary host messages, so
// a GPU stage and CPU stages of one pipeline exchange activations and gradients unchanged
// (docs/architecture.md §7: "cross-kind pipeline traffic is a staged send/recv").
//
// Split returns children staged the same way (owning the inner child), so TP and DP groups built
// from a staged world stage too. Cost: one device-host copy per transfer and a host allocation per
// staged tensor; NCCL between GPU ranks (comm/nccl_world.h) is the fast path this does not take.
//
// Ownership: borrows `inner` (or owns it, for children) and `backend`; both must outlive it.
// Thread safety and blocking: as communicator.h (one thread, the rank's, uses it); staging copies
// synchronise the backend's stream.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tensor/backend.h"

namespace motley::train {

class StagedCommunicator final : public comm::Communicator {
 public:
  StagedCommunicator(comm::Communicator& inner, tensor::Backend& backend);
  StagedCommunicator(std::unique_ptr<comm::Communicator> inner, tensor::Backend& backend);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }

  Status AllReduce(tensor::Tensor& data, comm::ReduceOp op) override;
  Status ReduceScatter(tensor::Tensor& out, const tensor::Tensor& in,
                       const std::vector<int64_t>& counts, comm::ReduceOp op) override;
  Status AllGather(tensor::Tensor& out, const tensor::Tensor& in,
                   const std::vector<int64_t>& counts) override;
  Status Broadcast(tensor::Tensor& data, int root) override;
  Status Send(const tensor::Tensor& data, int peer, int tag) override;
  Status Recv(tensor::Tensor& data, int peer, int tag) override;
  Result<comm::Request> ISend(const tensor::Tensor& data, int peer, int tag) override;
  Result<comm::Request> IRecv(tensor::Tensor& data, int peer, int tag) override;
  Status Wait(comm::Request& request) override;
  Status Barrier() override { return inner_->Barrier(); }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }
  Result<std::unique_ptr<comm::Communicator>> Split(int color, int key) override;

  // Bytes copied between device and host memory so far.
  uint64_t staged_bytes() const { return staged_bytes_; }

 private:
  // A host tensor shaped like t; filled with t's contents when `copy`.
  tensor::Tensor ToHost(const tensor::Tensor& t, bool copy);
  void FromHost(tensor::Tensor& device, const tensor::Tensor& host);

  std::unique_ptr<comm::Communicator> owned_;
  comm::Communicator* inner_;
  tensor::Backend& backend_;
  uint64_t staged_bytes_ = 0;
};

}  // namespace motley::train
