// See staged_communicator.h.
#include "train/staged_communicator.h"

#include <utility>

namespace motley::train {

using tensor::Tensor;

namespace {

bool OnDevice(const Tensor& t) {
  return t.defined() && !t.device().host_addressable();
}

// A pending ISend/IRecv: the inner request, the host copy, and (receives) where it goes.
struct StagedRequest final : comm::RequestImpl {
  comm::Request inner;
  Tensor host;
  Tensor device;  // defined for a receive into device memory
};

}  // namespace

StagedCommunicator::StagedCommunicator(comm::Communicator& inner, tensor::Backend& backend)
    : inner_(&inner), backend_(backend) {}

StagedCommunicator::StagedCommunicator(std::unique_ptr<comm::Communicator> inner,
                                       tensor::Backend& backend)
    : owned_(std::move(inner)), inner_(owned_.get()), backend_(backend) {
  MOTLEY_CHECK(inner_ != nullptr, "StagedCommunicator needs an inner communicator");
}

Tensor StagedCommunicator::ToHost(const Tensor& t, bool copy) {
  Tensor host = tensor::HostTensor(t.shape(), t.dtype());
  if (copy) {
    backend_.CopyToHost(host.raw(), t, t.bytes());
    staged_bytes_ += t.bytes();
  }
  return host;
}

void StagedCommunicator::FromHost(Tensor& device, const Tensor& host) {
  backend_.CopyFromHost(device, host.raw(), host.bytes());
  staged_bytes_ += host.bytes();
}

Status StagedCommunicator::AllReduce(Tensor& data, comm::ReduceOp op) {
  if (!OnDevice(data)) return inner_->AllReduce(data, op);
  Tensor host = ToHost(data, true);
  MOTLEY_RETURN_IF_ERROR(inner_->AllReduce(host, op));
  FromHost(data, host);
  return Status::Ok();
}

Status StagedCommunicator::ReduceScatter(Tensor& out, const Tensor& in,
                                         const std::vector<int64_t>& counts, comm::ReduceOp op) {
  if (!OnDevice(out) && !OnDevice(in)) return inner_->ReduceScatter(out, in, counts, op);
  Tensor host_in = OnDevice(in) ? ToHost(in, true) : in;
  Tensor host_out = OnDevice(out) ? ToHost(out, false) : out;
  MOTLEY_RETURN_IF_ERROR(inner_->ReduceScatter(host_out, host_in, counts, op));
  if (OnDevice(out)) FromHost(out, host_out);
  return Status::Ok();
}

Status StagedCommunicator::AllGather(Tensor& out, const Tensor& in,
                                     const std::vector<int64_t>& counts) {
  if (!OnDevice(out) && !OnDevice(in)) return inner_->AllGather(out, in, counts);
  Tensor host_in = OnDevice(in) ? ToHost(in, true) : in;
  Tensor host_out = OnDevice(out) ? ToHost(out, false) : out;
  MOTLEY_RETURN_IF_ERROR(inner_->AllGather(host_out, host_in, counts));
  if (OnDevice(out)) FromHost(out, host_out);
  return Status::Ok();
}

Status StagedCommunicator::Broadcast(Tensor& data, int root) {
  if (!OnDevice(data)) return inner_->Broadcast(data, root);
  Tensor host = ToHost(data, rank() == root);
  MOTLEY_RETURN_IF_ERROR(inner_->Broadcast(host, root));
  if (rank() != root) FromHost(data, host);
  return Status::Ok();
}

Status StagedCommunicator::Send(const Tensor& data, int peer, int tag) {
  if (!OnDevice(data)) return inner_->Send(data, peer, tag);
  return inner_->Send(ToHost(data, true), peer, tag);
}

Status StagedCommunicator::Recv(Tensor& data, int peer, int tag) {
  if (!OnDevice(data)) return inner_->Recv(data, peer, tag);
  Tensor host = ToHost(data, false);
  MOTLEY_RETURN_IF_ERROR(inner_->Recv(host, peer, tag));
  FromHost(data, host);
  return Status::Ok();
}

Result<comm::Request> StagedCommunicator::ISend(const Tensor& data, int peer, int tag) {
  auto r = std::make_unique<StagedRequest>();
  r->host = OnDevice(data) ? ToHost(data, true) : data;
  MOTLEY_ASSIGN_OR_RETURN(r->inner, inner_->ISend(r->host, peer, tag));
  return comm::Request(std::move(r));
}

Result<comm::Request> StagedCommunicator::IRecv(Tensor& data, int peer, int tag) {
  auto r = std::make_unique<StagedRequest>();
  if (OnDevice(data)) {
    r->host = ToHost(data, false);
    r->device = data;
  } else {
    r->host = data;
  }
  MOTLEY_ASSIGN_OR_RETURN(r->inner, inner_->IRecv(r->host, peer, tag));
  return comm::Request(std::move(r));
}

Status StagedCommunicator::Wait(comm::Request& request) {
  auto* r = dynamic_cast<StagedRequest*>(request.impl());
  if (r == nullptr) return inner_->Wait(request);
  Status s = inner_->Wait(r->inner);
  if (s.ok() && r->device.defined()) FromHost(r->device, r->host);
  request.reset();
  return s;
}

Result<std::unique_ptr<comm::Communicator>> StagedCommunicator::Split(int color, int key) {
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> child, inner_->Split(color, key));
  if (child == nullptr) return std::unique_ptr<comm::Communicator>();
  return std::unique_ptr<comm::Communicator>(new StagedCommunicator(std::move(child), backend_));
}

}  // namespace motley::train
