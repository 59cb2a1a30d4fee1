// The `nccl` backend (built only when CUDA and NCCL are found: MOTLEY_HAVE_NCCL, library
// motley_comm_nccl; the rest of comm never includes CUDA). One rank per GPU; collectives and
// point-to-point on CUDA device memory of this rank's device, run by NCCL on a stream of the
// communicator. It is exercised on a GPU by the CUDA issue; without a GPU its tests skip.
//
// Set-up: the NCCL unique id is made by rank 0 of a host communicator (local or mpi) and
// broadcast over it, so any host backend can bootstrap NCCL. The host communicator is borrowed
// (it must outlive this one) and also carries, before every collective, a check that all ranks
// called the same operation with the same sizes, root and reduce op (NCCL itself would hang or
// corrupt memory): a mismatch fails every rank with a clear error and nothing is launched.
//
// Waits: every call enqueues on the communicator's stream, records an event and POLLS it
// (cudaEventQuery and ncclCommGetAsyncError, back-off sleeps from 10 us to 1 ms), never a blocking
// synchronize; at the deadline (CommOptions, as every backend) it aborts the NCCL communicator and
// returns an error naming the operation and the group. NCCL cannot tell which rank is silent;
// the host backend's heartbeats can (mpi). Abort(reason) aborts the host world too (which
// releases ranks in host waits and fails their next call); ranks inside an NCCL wait end at
// their deadline. Device memory written by the caller on other streams must be complete before a
// call (Backend::Synchronize); the call returns when the operation completed on this rank.
//
// Point-to-point: NCCL matches sends and receives by order between two ranks, not by tag; tags
// keep their pending-use rule here but do not reorder messages. Sends and receives run on two
// separate streams so that an ISend followed by a Recv on both sides does not deadlock.
// Sizes of point-to-point messages are not checked across ranks.
//
// Ownership: Connect returns a communicator owning its NCCL communicator and streams; Split
// returns owned communicators (a split also splits the host communicator, owned by the child).
// Thread safety: as communicator.h.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/status.h"

namespace motley::comm {

class NcclWorld {
 public:
  // Number of CUDA devices visible, 0 when the CUDA runtime reports an error (no driver, no GPU).
  static int DeviceCount();
  // The NCCL communicator of host->rank() over the host group, on CUDA device `device`
  // (collective over `host`; every rank must use a different device).
  static Result<std::unique_ptr<Communicator>> Connect(Communicator* host, int device,
                                                       CommOptions options = {});
};

}  // namespace motley::comm
