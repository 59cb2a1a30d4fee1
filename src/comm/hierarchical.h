// The `hierarchical` backend: one group that mixes device kinds (docs/architecture.md §7).
// AllReduce runs the native library inside each homogeneous subgroup (intra), host transport
// between the subgroup leaders, then the native library again to spread the result. Broadcast is
// two-level too: the root's subgroup gets the data natively, the leaders pass it on over host
// transport, and every other subgroup spreads it natively, so only leaders stage through host
// memory. ReduceScatter and AllGather run over the flat host transport, staging every rank's
// tensors: a two-level form needs per-subgroup scratch tensors in device memory (each subgroup's
// share of the output, whose members need not be contiguous in group order), and neither
// tensor::Tensor (no views at an offset) nor HostStager (no allocator) can provide them.
// Point-to-point traffic between kinds goes over the flat host transport, staging tensors that
// are not host-addressable through host memory with a HostStager.
//
// Ownership: a HierarchicalCommunicator owns its three communicators; the HostStager is borrowed
// and must outlive it. Thread safety and blocking: as communicator.h.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "tensor/backend.h"

namespace motley::comm {

// Copies between device tensors of one kind and host tensors of the same shape and dtype.
class HostStager {
 public:
  virtual ~HostStager() = default;
  virtual Status ToHost(tensor::Tensor& host, const tensor::Tensor& device) = 0;
  virtual Status FromHost(tensor::Tensor& device, const tensor::Tensor& host) = 0;
};

// A HostStager over a Backend's CopyToHost / CopyFromHost (the backend is borrowed).
class BackendStager final : public HostStager {
 public:
  explicit BackendStager(tensor::Backend* backend) : backend_(backend) {}
  Status ToHost(tensor::Tensor& host, const tensor::Tensor& device) override;
  Status FromHost(tensor::Tensor& device, const tensor::Tensor& host) override;

 private:
  tensor::Backend* backend_;
};

struct HierarchicalParts {
  std::unique_ptr<Communicator> flat;     // host transport over the whole group
  std::unique_ptr<Communicator> intra;    // native library over this rank's kind; rank 0 leads
  std::unique_ptr<Communicator> leaders;  // host transport over the leaders; null on others
  HostStager* stager = nullptr;           // null when this kind's tensors are host memory
  // This rank's kind (the color of intra). Needed by the two-level Broadcast; with kind < 0,
  // Broadcast runs over the flat host transport.
  int kind = -1;
};

class HierarchicalCommunicator final : public Communicator {
 public:
  explicit HierarchicalCommunicator(HierarchicalParts parts);

  // Builds the parts by splitting `flat` (collective over flat): intra = ranks of the same
  // `kind`, unless `native_intra` is given (e.g. an NCCL communicator over the same ranks).
  static Result<std::unique_ptr<HierarchicalCommunicator>> Build(
      std::unique_ptr<Communicator> flat, int kind, HostStager* stager,
      std::unique_ptr<Communicator> native_intra = nullptr);

  int rank() const override { return parts_.flat->rank(); }
  int size() const override { return parts_.flat->size(); }
  const std::string& name() const override { return name_; }
  bool is_leader() const { return parts_.leaders != nullptr; }
  // Bytes this rank copied between device and host memory so far.
  uint64_t staged_bytes() const { return staged_bytes_; }

  Status AllReduce(tensor::Tensor& data, ReduceOp op) override;
  Status ReduceScatter(tensor::Tensor& out, const tensor::Tensor& in,
                       const std::vector<int64_t>& counts, ReduceOp op) override;
  Status AllGather(tensor::Tensor& out, const tensor::Tensor& in,
                   const std::vector<int64_t>& counts) override;
  Status Broadcast(tensor::Tensor& data, int root) override;
  Status Send(const tensor::Tensor& data, int peer, int tag) override;
  Status Recv(tensor::Tensor& data, int peer, int tag) override;
  Result<Request> ISend(const tensor::Tensor& data, int peer, int tag) override;
  Result<Request> IRecv(tensor::Tensor& data, int peer, int tag) override;
  Status Wait(Request& request) override;
  Status Barrier() override { return parts_.flat->Barrier(); }
  void Abort(const std::string& reason) override { parts_.flat->Abort(reason); }
  // Splits all three parts (collective over this group).
  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;

 private:
  bool NeedsStaging(const tensor::Tensor& t) const;
  // A host tensor holding t's data (t itself when t is host memory).
  Result<tensor::Tensor> StageIn(const tensor::Tensor& t, bool copy);
  Status StageOut(tensor::Tensor& t, const tensor::Tensor& host);
  // Fills kinds_ and intra_ranks_ (per flat rank) on first use: an all-gather over flat.
  Status EnsureLayout();

  HierarchicalParts parts_;
  std::vector<int> kinds_;        // flat rank -> kind
  std::vector<int> intra_ranks_;  // flat rank -> rank in its kind's intra group
  std::string name_;
  uint64_t staged_bytes_ = 0;
};

}  // namespace motley::comm
