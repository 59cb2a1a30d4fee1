// See nccl_world.h. The only file of comm that includes CUDA or NCCL headers.
#include "comm/nccl_world.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/core.h>

#include "comm/agreement.h"
#include "comm/transport.h"

namespace motley::comm {
namespace {

using tensor::DType;
using tensor::Tensor;
using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Err("{}: CUDA error {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

ncclDataType_t NcclType(DType d) {
  switch (d) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kI32: return ncclInt32;
    case DType::kBF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

// What every communicator of one process shares: the abort flag (Abort may come from any thread).
struct AbortState {
  std::mutex mu;
  bool aborted = false;
  std::string reason;
};

struct NcclRequest : RequestImpl {
  ~NcclRequest() override {
    if (event != nullptr) cudaEventDestroy(event);
  }
  cudaEvent_t event = nullptr;
  std::tuple<int, int, bool> key;  // (peer, tag, is_send)
  size_t bytes = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, Communicator* host, std::unique_ptr<Communicator> owned_host,
                   int device, CommOptions options, std::shared_ptr<AbortState> abort,
                   std::string name)
      : comm_(comm),
        host_(host),
        owned_host_(std::move(owned_host)),
        device_(device),
        options_(options),
        abort_(std::move(abort)),
        name_(std::move(name)) {}

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (comm_ != nullptr && ncclCommDestroy(comm_) != ncclSuccess) ncclCommAbort(comm_);
    if (event_ != nullptr) cudaEventDestroy(event_);
    for (cudaStream_t s : {coll_, send_, recv_}) {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  }

  Status Init() {
    MOTLEY_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
    for (cudaStream_t* s : {&coll_, &send_, &recv_}) {
      MOTLEY_RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(s), "cudaStreamCreate"));
    }
    return CudaStatus(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return name_; }

  Status AllReduce(Tensor& data, ReduceOp op) override {
    MOTLEY_RETURN_IF_ERROR(Enter("AllReduce", {&data}));
    MOTLEY_RETURN_IF_ERROR(Agree("AllReduce", OpKind::kAllReduce, data.numel(),
                                 Meta({static_cast<int64_t>(data.dtype()), Op(op)})));
    return Run("AllReduce", data.bytes(), coll_, [&] {
      return ncclAllReduce(data.raw(), data.raw(), static_cast<size_t>(data.numel()),
                           NcclType(data.dtype()), NcclOp(op), comm_, coll_);
    });
  }

  Status ReduceScatter(Tensor& out, const Tensor& in, const std::vector<int64_t>& counts,
                       ReduceOp op) override {
    MOTLEY_RETURN_IF_ERROR(Enter("ReduceScatter", {&out, &in}));
    MOTLEY_RETURN_IF_ERROR(CheckCounts("ReduceScatter", counts, in, out));
    std::vector<int64_t> meta = counts;
    meta.push_back(static_cast<int64_t>(in.dtype()));
    meta.push_back(Op(op));
    MOTLEY_RETURN_IF_ERROR(Agree("ReduceScatter", OpKind::kReduceScatter, in.numel(), Meta(meta)));
    const bool even =
        std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts.front(); });
    const size_t es = tensor::DTypeSize(in.dtype());
    return Run("ReduceScatter", in.bytes(), coll_, [&]() -> ncclResult_t {
      if (even) {
        return ncclReduceScatter(in.raw(), out.raw(), static_cast<size_t>(counts.front()),
                                 NcclType(in.dtype()), NcclOp(op), comm_, coll_);
      }
      // Uneven counts: one reduce per rank, rooted at the rank owning the slice.
      ncclResult_t r = ncclGroupStart();
      size_t offset = 0;
      for (size_t k = 0; k < counts.size() && r == ncclSuccess; ++k) {
        const auto* src = static_cast<const char*>(in.raw()) + offset * es;
        r = ncclReduce(src, out.raw(), static_cast<size_t>(counts[k]), NcclType(in.dtype()),
                       NcclOp(op), static_cast<int>(k), comm_, coll_);
        offset += static_cast<size_t>(counts[k]);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    });
  }

  Status AllGather(Tensor& out, const Tensor& in, const std::vector<int64_t>& counts) override {
    MOTLEY_RETURN_IF_ERROR(Enter("AllGather", {&out, &in}));
    MOTLEY_RETURN_IF_ERROR(CheckCounts("AllGather", counts, out, in));
    std::vector<int64_t> meta = counts;
    meta.push_back(static_cast<int64_t>(in.dtype()));
    MOTLEY_RETURN_IF_ERROR(Agree("AllGather", OpKind::kAllGather, out.numel(), Meta(meta)));
    const bool even =
        std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts.front(); });
    const size_t es = tensor::DTypeSize(in.dtype());
    return Run("AllGather", out.bytes(), coll_, [&]() -> ncclResult_t {
      if (even) {
        return ncclAllGather(in.raw(), out.raw(), static_cast<size_t>(counts.front()),
                             NcclType(in.dtype()), comm_, coll_);
      }
      // Uneven counts: one broadcast per rank into its slice of the output.
      ncclResult_t r = ncclGroupStart();
      size_t offset = 0;
      for (size_t k = 0; k < counts.size() && r == ncclSuccess; ++k) {
        char* dst = static_cast<char*>(out.raw()) + offset * es;
        const void* src = static_cast<int>(k) == rank() ? in.raw() : dst;
        r = ncclBroadcast(src, dst, static_cast<size_t>(counts[k]), NcclType(in.dtype()),
                          static_cast<int>(k), comm_, coll_);
        offset += static_cast<size_t>(counts[k]);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    });
  }

  Status Broadcast(Tensor& data, int root) override {
    MOTLEY_RETURN_IF_ERROR(Enter("Broadcast", {&data}));
    if (root < 0 || root >= size()) {
      return Err("Broadcast on group '{}': root {} out of range [0, {})", name_, root, size());
    }
    MOTLEY_RETURN_IF_ERROR(Agree("Broadcast", OpKind::kBroadcast, data.numel(),
                                 Meta({static_cast<int64_t>(data.dtype()), root})));
    return Run("Broadcast", data.bytes(), coll_, [&] {
      return ncclBroadcast(data.raw(), data.raw(), static_cast<size_t>(data.numel()),
                           NcclType(data.dtype()), root, comm_, coll_);
    });
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
    auto* r = dynamic_cast<NcclRequest*>(request.impl());
    if (r == nullptr) return Err("Wait on group '{}': empty or foreign request", name_);
    const char* op = std::get<2>(r->key) ? "Send" : "Recv";
    Status s = PollEvent(op, r->event, DeadlineFor(static_cast<double>(r->bytes)));
    pending_.erase(r->key);
    request.reset();
    return s;
  }

  // All ranks reach it after their earlier calls completed (every call waits), so the host
  // barrier is a barrier of this communicator too.
  Status Barrier() override {
    MOTLEY_RETURN_IF_ERROR(Enter("Barrier", {}));
    return host_->Barrier().WithContext(fmt::format("Barrier on group '{}' (host)", name_));
  }

  void Abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(abort_->mu);
      if (!abort_->aborted) {
        abort_->aborted = true;
        abort_->reason = fmt::format("{} (group '{}', rank {})", reason, name_, rank());
      }
    }
    host_->Abort(reason);
  }

  Result<std::unique_ptr<Communicator>> Split(int color, int key) override {
    MOTLEY_RETURN_IF_ERROR(Enter("Split", {}));
    if (color < 0 && color != kUndefinedColor) {
      return Err("Split on group '{}': color must be >= 0 or kUndefinedColor, got {}", name_,
                 color);
    }
    MOTLEY_ASSIGN_OR_RETURN(auto sub_host, host_->Split(color, key));
    const uint64_t seq = split_seq_++;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t sub = nullptr;
    const Deadline deadline = DeadlineFor(0.0);
    MOTLEY_RETURN_IF_ERROR(
        Settle("Split",
               ncclCommSplit(comm_, color == kUndefinedColor ? NCCL_SPLIT_NOCOLOR : color, key,
                             &sub, &config),
               deadline));
    if (sub != nullptr) MOTLEY_RETURN_IF_ERROR(SettleComm("Split", sub, deadline));
    if (color == kUndefinedColor) return std::unique_ptr<Communicator>();
    if (sub == nullptr || sub_host == nullptr) {
      return Err("Split on group '{}': NCCL returned no communicator for color {}", name_, color);
    }
    Communicator* host = sub_host.get();
    auto child = std::make_unique<NcclCommunicator>(
        sub, host, std::move(sub_host), device_, options_, abort_,
        fmt::format("{}/split{}.c{}", name_, seq, color));
    MOTLEY_RETURN_IF_ERROR(child->Init());
    return std::unique_ptr<Communicator>(std::move(child));
  }

  // Polls ncclCommGetAsyncError of `comm` until it leaves ncclInProgress (non-blocking mode).
  Status SettleComm(const char* op, ncclComm_t comm, Deadline deadline) {
    auto sleep = std::chrono::microseconds(10);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
      if (r != ncclSuccess) return NcclError(op, r, comm);
      if (state == ncclSuccess) return Status::Ok();
      if (state != ncclInProgress) return NcclError(op, state, comm);
      if (Clock::now() >= deadline) {
        return Err("{} on group '{}': deadline passed while NCCL was still setting up", op, name_);
      }
      std::this_thread::sleep_for(sleep);
      sleep = std::min<std::chrono::microseconds>(sleep * 2, std::chrono::milliseconds(1));
    }
  }

 private:
  static int64_t Op(ReduceOp op) { return static_cast<int64_t>(op); }
  static ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }
  static uint64_t Meta(const std::vector<int64_t>& words) { return HashArgs(words); }

  Status NcclError(const char* op, ncclResult_t r, ncclComm_t comm) const {
    const char* detail = comm != nullptr ? ncclGetLastError(comm) : "";
    return Err("{} on group '{}': NCCL error {} ({}){}{}", op, name_, static_cast<int>(r),
               ncclGetErrorString(r), detail != nullptr && *detail != 0 ? ": " : "",
               detail != nullptr ? detail : "");
  }

  Deadline DeadlineFor(double bytes) const {
    const Seconds expected = bytes / options_.nominal_bandwidth_bytes_per_s;
    const Seconds budget = std::max(options_.deadline_floor_s, options_.deadline_scale * expected);
    return Clock::now() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(budget));
  }

  Status AbortStatus() {
    std::lock_guard<std::mutex> lock(abort_->mu);
    if (!abort_->aborted) return Status::Ok();
    return Err("aborted: {}", abort_->reason);
  }

  Status Enter(const char* op, std::initializer_list<const Tensor*> tensors) {
    const std::string where = fmt::format("{} on group '{}'", op, name_);
    MOTLEY_RETURN_IF_ERROR(AbortStatus().WithContext(where));
    if (!broken_.ok()) return broken_.WithContext(where);
    const Tensor* first = nullptr;
    for (const Tensor* t : tensors) {
      if (!t->defined()) return Err("{}: undefined tensor", where);
      const tensor::Device d = t->device();
      if (d.kind != tensor::DeviceKind::kCuda || d.index != device_) {
        return Err(
            "{}: the nccl communicator of cuda:{} cannot access {} memory (stage it, as "
            "HierarchicalCommunicator does)",
            where, device_, tensor::DeviceName(d));
      }
      if (first != nullptr && first->dtype() != t->dtype()) {
        return Err("{}: dtypes differ ({} vs {})", where, tensor::DTypeName(first->dtype()),
                   tensor::DTypeName(t->dtype()));
      }
      first = t;
    }
    return CudaStatus(cudaSetDevice(device_), "cudaSetDevice").WithContext(where);
  }

  Status CheckCounts(const char* op, const std::vector<int64_t>& counts, const Tensor& full,
                     const Tensor& part) const {
    return CheckGatherCounts(name_, op, rank(), size(), counts, full, part);
  }
  Status Agree(const char* op, OpKind kind, int64_t count, uint64_t meta) {
    return AgreeOnCall(*host_, name_, op, kind, count, meta);
  }

  // Enqueues `launch` on `stream`, then waits for it by polling an event.
  Status Run(const char* op, size_t bytes, cudaStream_t stream,
             const std::function<ncclResult_t()>& launch) {
    const Deadline deadline = DeadlineFor(2.0 * static_cast<double>(bytes));
    MOTLEY_RETURN_IF_ERROR(Settle(op, launch(), deadline));
    MOTLEY_RETURN_IF_ERROR(
        CudaStatus(cudaEventRecord(event_, stream), "cudaEventRecord").WithContext(op));
    return PollEvent(op, event_, deadline);
  }

  // A non-blocking NCCL call may return ncclInProgress: wait until it settled.
  Status Settle(const char* op, ncclResult_t r, Deadline deadline) {
    if (r == ncclSuccess) return Status::Ok();
    if (r != ncclInProgress) return NcclError(op, r, comm_);
    return SettleComm(op, comm_, deadline);
  }

  // Polls `event` (and NCCL's asynchronous error) with back-off until it completed, the deadline
  // passed or the world aborted; the last two abort the NCCL communicator.
  Status PollEvent(const char* op, cudaEvent_t event, Deadline deadline) {
    auto sleep = std::chrono::microseconds(10);
    for (;;) {
      const cudaError_t q = cudaEventQuery(event);
      if (q == cudaSuccess) return Status::Ok();
      if (q != cudaErrorNotReady) return Break(CudaStatus(q, "cudaEventQuery").WithContext(op));
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        return Break(NcclError(op, async, comm_));
      }
      Status aborted = AbortStatus();
      if (!aborted.ok())
        return Break(aborted.WithContext(fmt::format("{} on group '{}'", op, name_)));
      if (Clock::now() >= deadline) {
        return Break(
            Err("{} on group '{}': deadline passed waiting for NCCL (it cannot tell "
                "which rank is silent; the host backend's heartbeats can)",
                op, name_));
      }
      std::this_thread::sleep_for(sleep);
      sleep = std::min<std::chrono::microseconds>(sleep * 2, std::chrono::milliseconds(1));
    }
  }

  // After a failed wait the NCCL communicator is unusable: abort it and fail later calls.
  Status Break(Status why) {
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    broken_ = Err("the NCCL communicator was aborted after: {}", why.message());
    return why;
  }

  Result<Request> PostP2p(Tensor& data, int peer, int tag, bool is_send) {
    const char* op = is_send ? "Send" : "Recv";
    MOTLEY_RETURN_IF_ERROR(Enter(op, {&data}));
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
    auto r = std::make_unique<NcclRequest>();
    r->key = key;
    r->bytes = data.bytes();
    MOTLEY_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&r->event, cudaEventDisableTiming), "cudaEventCreate"));
    cudaStream_t stream = is_send ? send_ : recv_;
    const auto count = static_cast<size_t>(data.numel());
    const ncclResult_t launched =
        is_send ? ncclSend(data.raw(), count, NcclType(data.dtype()), peer, comm_, stream)
                : ncclRecv(data.raw(), count, NcclType(data.dtype()), peer, comm_, stream);
    MOTLEY_RETURN_IF_ERROR(Settle(op, launched, DeadlineFor(0.0)));
    MOTLEY_RETURN_IF_ERROR(
        CudaStatus(cudaEventRecord(r->event, stream), "cudaEventRecord").WithContext(op));
    pending_.insert(key);
    return Request(std::move(r));
  }

  ncclComm_t comm_;
  Communicator* host_;
  std::unique_ptr<Communicator> owned_host_;  // splits own their host subgroup
  int device_;
  CommOptions options_;
  std::shared_ptr<AbortState> abort_;
  std::string name_;
  Status broken_;
  cudaStream_t coll_ = nullptr, send_ = nullptr, recv_ = nullptr;
  cudaEvent_t event_ = nullptr;
  uint64_t split_seq_ = 0;
  std::set<std::tuple<int, int, bool>> pending_;
};

}  // namespace

int NcclWorld::DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

Result<std::unique_ptr<Communicator>> NcclWorld::Connect(Communicator* host, int device,
                                                         CommOptions options) {
  if (host == nullptr) return Err("NcclWorld::Connect: no host communicator");
  const std::string where =
      fmt::format("NcclWorld::Connect (rank {} of host group '{}')", host->rank(), host->name());
  // Every rank says whether it can take part, so that one rank's failure fails all at once.
  Status local;
  const int count = DeviceCount();
  if (device < 0 || device >= count) {
    local = Err("CUDA device {} out of range [0, {})", device, count);
  } else {
    local = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (local.ok() && host->rank() == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) local = Err("ncclGetUniqueId: {}", ncclGetErrorString(r));
  }
  Tensor failed = tensor::HostTensor(tensor::Shape{1}, DType::kI32);
  failed.data<int32_t>()[0] = local.ok() ? -1 : host->rank();
  MOTLEY_RETURN_IF_ERROR(host->AllReduce(failed, ReduceOp::kMax).WithContext(where));
  if (!local.ok()) return local.WithContext(where);
  if (failed.data<int32_t>()[0] >= 0) {
    return Err("{}: rank {} of the host group could not set up CUDA or NCCL", where,
               failed.data<int32_t>()[0]);
  }
  // The unique id travels over the host backend.
  static_assert(sizeof(ncclUniqueId) % 4 == 0, "ncclUniqueId is sent as int32 words");
  Tensor id_words = tensor::HostTensor(
      tensor::Shape{static_cast<int64_t>(sizeof(ncclUniqueId) / 4)}, DType::kI32);
  std::memcpy(id_words.data<int32_t>(), &id, sizeof(id));
  MOTLEY_RETURN_IF_ERROR(host->Broadcast(id_words, 0).WithContext(where));
  std::memcpy(&id, id_words.data<int32_t>(), sizeof(id));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // calls return at once; waits poll (see nccl_world.h)
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, host->size(), id, host->rank(), &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    return Err("{}: ncclCommInitRankConfig: {}", where, ncclGetErrorString(r));
  }
  auto world = std::make_unique<NcclCommunicator>(comm, host, nullptr, device, options,
                                                  std::make_shared<AbortState>(), "nccl");
  const Seconds floor = options.deadline_floor_s;
  const Deadline deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(floor));
  MOTLEY_RETURN_IF_ERROR(world->SettleComm("Connect", comm, deadline).WithContext(where));
  MOTLEY_RETURN_IF_ERROR(world->Init().WithContext(where));
  return std::unique_ptr<Communicator>(std::move(world));
}

}  // namespace motley::comm
