// See hierarchical.h.
#include "comm/hierarchical.h"

#include <fmt/core.h>

namespace motley::comm {

using tensor::Tensor;

Status BackendStager::ToHost(Tensor& host, const Tensor& device) {
  if (host.bytes() != device.bytes()) return Err("BackendStager::ToHost: sizes differ");
  backend_->CopyToHost(host.raw(), device, device.bytes());
  return Status::Ok();
}

Status BackendStager::FromHost(Tensor& device, const Tensor& host) {
  if (host.bytes() != device.bytes()) return Err("BackendStager::FromHost: sizes differ");
  backend_->CopyFromHost(device, host.raw(), host.bytes());
  return Status::Ok();
}

HierarchicalCommunicator::HierarchicalCommunicator(HierarchicalParts parts)
    : parts_(std::move(parts)) {
  MOTLEY_CHECK(parts_.flat != nullptr && parts_.intra != nullptr,
               "HierarchicalCommunicator needs flat and intra communicators");
  MOTLEY_CHECK((parts_.intra->rank() == 0) == (parts_.leaders != nullptr),
               "exactly the intra rank 0 of each kind is a leader");
  name_ = parts_.flat->name() + "/hier";
}

Result<std::unique_ptr<HierarchicalCommunicator>> HierarchicalCommunicator::Build(
    std::unique_ptr<Communicator> flat, int kind, HostStager* stager,
    std::unique_ptr<Communicator> native_intra) {
  if (kind < 0) return Err("HierarchicalCommunicator::Build: kind must be >= 0, got {}", kind);
  HierarchicalParts parts;
  if (native_intra != nullptr) {
    parts.intra = std::move(native_intra);
  } else {
    MOTLEY_ASSIGN_OR_RETURN(parts.intra, flat->Split(kind, flat->rank()));
  }
  const bool leader = parts.intra->rank() == 0;
  MOTLEY_ASSIGN_OR_RETURN(parts.leaders, flat->Split(leader ? 0 : kUndefinedColor, flat->rank()));
  parts.flat = std::move(flat);
  parts.stager = stager;
  parts.kind = kind;
  return std::make_unique<HierarchicalCommunicator>(std::move(parts));
}

bool HierarchicalCommunicator::NeedsStaging(const Tensor& t) const {
  return !t.device().host_addressable();
}

Result<Tensor> HierarchicalCommunicator::StageIn(const Tensor& t, bool copy) {
  if (!NeedsStaging(t)) return t;
  if (parts_.stager == nullptr) {
    return Err("group '{}': a {} tensor needs a HostStager to cross kinds", name_,
               tensor::DeviceName(t.device()));
  }
  Tensor host = tensor::HostTensor(t.shape(), t.dtype());
  if (copy) {
    MOTLEY_RETURN_IF_ERROR(parts_.stager->ToHost(host, t));
    staged_bytes_ += t.bytes();
  }
  return host;
}

Status HierarchicalCommunicator::StageOut(Tensor& t, const Tensor& host) {
  if (!NeedsStaging(t)) return Status::Ok();
  staged_bytes_ += t.bytes();
  return parts_.stager->FromHost(t, host);
}

Status HierarchicalCommunicator::AllReduce(Tensor& data, ReduceOp op) {
  const std::string ctx = fmt::format("AllReduce on group '{}'", name_);
  MOTLEY_RETURN_IF_ERROR(parts_.intra->AllReduce(data, op).WithContext(ctx + " (intra)"));
  if (parts_.leaders != nullptr && parts_.leaders->size() > 1) {
    MOTLEY_ASSIGN_OR_RETURN(Tensor host, StageIn(data, /*copy=*/true));
    MOTLEY_RETURN_IF_ERROR(parts_.leaders->AllReduce(host, op).WithContext(ctx + " (leaders)"));
    MOTLEY_RETURN_IF_ERROR(StageOut(data, host));
  }
  return parts_.intra->Broadcast(data, 0).WithContext(ctx + " (spread)");
}

Status HierarchicalCommunicator::ReduceScatter(Tensor& out, const Tensor& in,
                                               const std::vector<int64_t>& counts, ReduceOp op) {
  MOTLEY_ASSIGN_OR_RETURN(Tensor host_in, StageIn(in, true));
  MOTLEY_ASSIGN_OR_RETURN(Tensor host_out, StageIn(out, false));
  MOTLEY_RETURN_IF_ERROR(parts_.flat->ReduceScatter(host_out, host_in, counts, op));
  return StageOut(out, host_out);
}

Status HierarchicalCommunicator::AllGather(Tensor& out, const Tensor& in,
                                           const std::vector<int64_t>& counts) {
  MOTLEY_ASSIGN_OR_RETURN(Tensor host_in, StageIn(in, true));
  MOTLEY_ASSIGN_OR_RETURN(Tensor host_out, StageIn(out, false));
  MOTLEY_RETURN_IF_ERROR(parts_.flat->AllGather(host_out, host_in, counts));
  return StageOut(out, host_out);
}

Status HierarchicalCommunicator::EnsureLayout() {
  if (!kinds_.empty()) return Status::Ok();
  const int n = size();
  Tensor mine = tensor::HostTensor(tensor::Shape{2}, tensor::DType::kI32);
  mine.data<int32_t>()[0] = parts_.kind;
  mine.data<int32_t>()[1] = parts_.intra->rank();
  Tensor all = tensor::HostTensor(tensor::Shape{2 * int64_t{n}}, tensor::DType::kI32);
  MOTLEY_RETURN_IF_ERROR(
      parts_.flat->AllGather(all, mine, std::vector<int64_t>(static_cast<size_t>(n), 2)));
  std::vector<int> kinds(static_cast<size_t>(n)), intra(static_cast<size_t>(n));
  for (size_t r = 0; r < kinds.size(); ++r) {
    kinds[r] = all.data<int32_t>()[2 * r];
    intra[r] = all.data<int32_t>()[2 * r + 1];
  }
  kinds_ = std::move(kinds);
  intra_ranks_ = std::move(intra);
  return Status::Ok();
}

Status HierarchicalCommunicator::Broadcast(Tensor& data, int root) {
  const std::string ctx = fmt::format("Broadcast on group '{}'", name_);
  if (root < 0 || root >= size()) {
    return Err("{}: root {} out of range [0, {})", ctx, root, size());
  }
  if (parts_.kind < 0) {  // kind unknown: over the flat host transport
    MOTLEY_ASSIGN_OR_RETURN(Tensor host, StageIn(data, rank() == root));
    MOTLEY_RETURN_IF_ERROR(parts_.flat->Broadcast(host, root));
    if (rank() == root) return Status::Ok();
    return StageOut(data, host);
  }
  MOTLEY_RETURN_IF_ERROR(EnsureLayout().WithContext(ctx + " (layout)"));
  const int root_kind = kinds_[static_cast<size_t>(root)];
  const bool root_side = parts_.kind == root_kind;
  // 1. The root's subgroup gets the data natively.
  if (root_side) {
    MOTLEY_RETURN_IF_ERROR(parts_.intra->Broadcast(data, intra_ranks_[static_cast<size_t>(root)])
                               .WithContext(ctx + " (intra, root's kind)"));
  }
  // 2. The leaders pass it on; leaders are ordered by flat rank (Build and Split use that key).
  if (parts_.leaders != nullptr && parts_.leaders->size() > 1) {
    int leader_root = 0;
    for (size_t r = 0; r < kinds_.size(); ++r) {
      if (intra_ranks_[r] != 0) continue;
      if (kinds_[r] == root_kind) break;
      ++leader_root;
    }
    MOTLEY_ASSIGN_OR_RETURN(Tensor host, StageIn(data, /*copy=*/root_side));
    MOTLEY_RETURN_IF_ERROR(
        parts_.leaders->Broadcast(host, leader_root).WithContext(ctx + " (leaders)"));
    if (!root_side) MOTLEY_RETURN_IF_ERROR(StageOut(data, host));
  }
  // 3. Every other subgroup spreads it natively from its leader.
  if (!root_side) {
    MOTLEY_RETURN_IF_ERROR(parts_.intra->Broadcast(data, 0).WithContext(ctx + " (spread)"));
  }
  return Status::Ok();
}

namespace {
struct StagedRequest : RequestImpl {
  Request inner;
  Tensor host;
  Tensor device;  // receives: where the host data goes on completion
  bool unstage = false;
};
}  // namespace

Status HierarchicalCommunicator::Send(const Tensor& data, int peer, int tag) {
  MOTLEY_ASSIGN_OR_RETURN(Request r, ISend(data, peer, tag));
  return Wait(r);
}

Status HierarchicalCommunicator::Recv(Tensor& data, int peer, int tag) {
  MOTLEY_ASSIGN_OR_RETURN(Request r, IRecv(data, peer, tag));
  return Wait(r);
}

Result<Request> HierarchicalCommunicator::ISend(const Tensor& data, int peer, int tag) {
  auto r = std::make_unique<StagedRequest>();
  MOTLEY_ASSIGN_OR_RETURN(r->host, StageIn(data, true));
  MOTLEY_ASSIGN_OR_RETURN(r->inner, parts_.flat->ISend(r->host, peer, tag));
  return Request(std::move(r));
}

Result<Request> HierarchicalCommunicator::IRecv(Tensor& data, int peer, int tag) {
  auto r = std::make_unique<StagedRequest>();
  MOTLEY_ASSIGN_OR_RETURN(r->host, StageIn(data, false));
  r->device = data;
  r->unstage = NeedsStaging(data);
  MOTLEY_ASSIGN_OR_RETURN(r->inner, parts_.flat->IRecv(r->host, peer, tag));
  return Request(std::move(r));
}

Status HierarchicalCommunicator::Wait(Request& request) {
  auto* r = dynamic_cast<StagedRequest*>(request.impl());
  if (r == nullptr) return Err("Wait on group '{}': empty or foreign request", name_);
  Status s = parts_.flat->Wait(r->inner);
  if (s.ok() && r->unstage) s = StageOut(r->device, r->host);
  request.reset();
  return s;
}

Result<std::unique_ptr<Communicator>> HierarchicalCommunicator::Split(int color, int key) {
  HierarchicalParts parts;
  MOTLEY_ASSIGN_OR_RETURN(parts.intra, parts_.intra->Split(color, key));
  MOTLEY_ASSIGN_OR_RETURN(parts.flat, parts_.flat->Split(color, key));
  if (parts.flat == nullptr) return std::unique_ptr<Communicator>();
  const bool leader = parts.intra->rank() == 0;
  MOTLEY_ASSIGN_OR_RETURN(parts.leaders,
                          parts.flat->Split(leader ? 0 : kUndefinedColor, parts.flat->rank()));
  parts.stager = parts_.stager;
  parts.kind = parts_.kind;
  return std::unique_ptr<Communicator>(new HierarchicalCommunicator(std::move(parts)));
}

}  // namespace motley::comm
