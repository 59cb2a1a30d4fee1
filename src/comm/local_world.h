// The `local` backend: ranks are threads of one process (the single-machine default and the test
// workhorse). A LocalWorld is the shared in-process "world"; each rank thread connects once and
// gets its world communicator, from which subgroups are split.
//
// Transfers are rendezvous with one copy: a send posts its buffer, and the receiving thread copies
// (or reduces) straight from it, so each rank copies its own incoming data. Waits sleep on a
// condition variable (no spinning). A rank whose communicators are all destroyed counts as lost:
// peers waiting on it fail at once. Liveness in errors: the activity each rank is in and how long
// ago it last touched the communicator.
//
// Without link emulation, collectives take the shared-memory path (Transport::SharedCollective,
// shared_collectives.h): the ranks meet once, each reads and writes its peers' tensors directly
// (no staging copies, no per-step messages), and meet again before returning. With emulation they
// run as ring algorithms over charged point-to-point transfers, so that their time comes out of
// the algorithm.
//
// Ownership: LocalWorld is shared (shared_ptr) by the creator and every communicator of it.
// Thread safety: Connect, Abort and size are safe from any thread; see communicator.h for the rest.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/link_model.h"
#include "core/status.h"
#include "tensor/tensor.h"

namespace motley::comm {

struct LocalWorldOptions {
  // Device kinds whose memory the transport reads and writes directly. The default is host memory;
  // a test may add kCuda to stand for a "native library" that handles device memory itself.
  std::vector<tensor::DeviceKind> accessible = {tensor::DeviceKind::kCpu,
                                                tensor::DeviceKind::kEmulated};
};

class LocalWorldState;

class LocalWorld {
 public:
  static std::shared_ptr<LocalWorld> Create(int size, LocalWorldOptions options = {});
  ~LocalWorld();
  int size() const;
  // The world communicator of `rank` (once per rank). `emulation` charges transfers to the rank's
  // clock over links indexed by world rank (links->world_size() must equal size()).
  Result<std::unique_ptr<Communicator>> Connect(int rank, CommOptions options = {},
                                                Emulation emulation = {});
  // Aborts the whole world from outside any rank (e.g. a supervisor).
  void Abort(const std::string& reason);

 private:
  explicit LocalWorld(std::shared_ptr<LocalWorldState> state);
  std::shared_ptr<LocalWorldState> state_;
};

}  // namespace motley::comm
