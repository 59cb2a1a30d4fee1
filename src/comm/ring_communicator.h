// The ring engine: a Communicator built on any Transport (local threads, MPI). Collectives are ring
// algorithms over point-to-point transfers (reduce-scatter and all-gather rings, all-reduce = both,
// pipelined chain broadcast, dissemination barrier), so that under link emulation their time comes
// out of the algorithm: each transfer is charged latency + bytes / bandwidth of its link on the
// sender's outgoing link (transfers on one link queue behind each other), and a receive completes at
// max(receiver clock, arrival). See communicator.h for the contract.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/link_model.h"
#include "comm/transport.h"

namespace motley::comm {

// The world communicator of the rank that owns `transport`. Validates `emulation` (its link matrix
// must cover the transport's world).
Result<std::unique_ptr<Communicator>> MakeRingWorld(std::shared_ptr<Transport> transport,
                                                    const CommOptions& options,
                                                    const Emulation& emulation);

// Bytes per broadcast chunk (the chain broadcast pipelines chunks of this size).
inline constexpr size_t kBroadcastChunkBytes = size_t{1} << 20;

}  // namespace motley::comm
