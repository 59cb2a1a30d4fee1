// Migration of model and optimizer state between two plans at a step boundary (docs/architecture.md
// §9, issue 6): every tensor a rank holds under the NEW plan (its shard of each parameter's value
// and AdamW moments m and v) is assembled from pieces sent DIRECTLY by the ranks that held them
// under the OLD plan, over the world communicator (tagged point-to-point; no gather to one rank, no
// files). Gradients are not moved (every step starts by zeroing them).
//
// Contract:
//  - Both layouts are over the same world (WorldLayout::Build(plan, world_devices), the same
//    size); a rank may be idle in either (it then sends or receives nothing for itself).
//  - PlanMigration is a pure function of (from, to, model): every rank computes the same moves.
//    For each new holder and tensor it covers the holder's slice (its TP shard, or the whole
//    tensor) with pieces of old holders' slices: the holder itself when it already held the data
//    (a local copy, no transfer), otherwise the old holder (of any replica, any TP degree) whose
//    sends would finish first: its estimated send time so far plus this piece's (TransferTimeFn,
//    e.g. from the cluster's link classes; without one, bytes stand for time), lowest rank on a
//    tie. A piece is a contiguous range along the
//    tensor's TP dimension (model/shards.h), so a new TP degree gets exactly the slices it needs.
//  - Migrate is collective over `world`: one all-reduce checks that every rank is at the same
//    optimizer step, then each rank posts one message to each peer it sends pieces to and one
//    receive from each peer it gets pieces from (tag kMigrationTag), and waits for all. Message
//    contents follow the plan's move order, so no metadata travels. The copy is bit-exact.
//  - The old state travels as a host snapshot (SnapshotState) so that the caller can free the old
//    stage before it allocates the new one (device memory peaks at max(old, new), not the sum).
//  - AdamW keeps no per-rank step counter (its bias correction uses the global step, model/
//    optimizer.h), so the "step count" moved is that global step, checked to agree on all ranks.
//  - Times are on the rank's clock (rank_clock.h): an emulated cluster charges every transfer
//    over its link class on the virtual (or paced wall) clock.
//
// Ownership: functions borrow their arguments for the call. Thread safety: PlanMigration,
// StageLayoutOf and SnapshotState touch only their arguments; Migrate and ChecksumState are
// collective and used by one rank's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/parameters.h"
#include "parallel/rank_clock.h"
#include "parallel/world_layout.h"
#include "spec/model_spec.h"
#include "tensor/backend.h"

namespace motley::parallel {

// The tag of migration messages (pipeline transfers use small tags, stage_executor.h).
inline constexpr int kMigrationTag = comm::kMaxUserTag;

// One piece of one tensor (value, m and v alike) moving from an old holder to a new holder.
struct MigrationMove {
  std::string name;   // parameter name (model/parameters.h)
  int source = 0;     // world rank holding the piece under the old plan
  int dest = 0;       // world rank holding it under the new plan
  int dim = -1;       // dimension of the full tensor the piece is a range of; -1: whole tensor
  int64_t begin = 0;  // [begin, end) along dim (unused when dim == -1)
  int64_t end = 0;
  tensor::Shape shape;  // the piece's shape

  // Bytes of value + m + v (f32).
  int64_t bytes() const { return 3 * shape.numel() * static_cast<int64_t>(sizeof(float)); }
  bool local() const { return source == dest; }
};

struct MigrationPlan {
  int world_size = 0;
  std::vector<MigrationMove> moves;  // by destination rank, then its tensor order, then position

  int64_t NetworkBytes() const;           // over moves that are not local
  int64_t SentBytes(int rank) const;      // network bytes rank sends
  int64_t ReceivedBytes(int rank) const;  // network bytes rank receives
};

// Estimated seconds to send `bytes` from world rank `source` to world rank `dest`.
using TransferTimeFn = std::function<double(int source, int dest, int64_t bytes)>;

// Errors when the layouts' world sizes or devices differ, or a tensor of the new plan has no old
// holder (plans must both be valid for `model`). `transfer_time` (may be empty) picks senders.
Result<MigrationPlan> PlanMigration(const WorldLayout& from, const WorldLayout& to,
                                    const spec::ModelSpec& model,
                                    const TransferTimeFn& transfer_time = {});

// The model::StageLayout of non-idle rank r's model chunk `chunk` (0 without interleaving).
model::StageLayout StageLayoutOf(const WorldLayout& layout, int r, int chunk = 0);
// The parameters non-idle rank r holds, every chunk's in chunk order (the order of
// ParallelRank::params()).
std::vector<model::ParamInfo> RankParamInfos(const spec::ModelSpec& model,
                                             const WorldLayout& layout, int r);

// Host copy of one rank's values and AdamW moments under the old plan (empty for an idle rank).
struct StateSnapshot {
  struct Entry {
    model::ParamInfo info;
    std::vector<float> value, m, v;
  };
  std::vector<Entry> entries;
  const Entry* Find(const std::string& name) const;
};
StateSnapshot SnapshotState(tensor::Backend& backend, const model::ParameterSet* params);

// What one rank did in Migrate.
struct MigrationStats {
  int64_t sent_bytes = 0;      // network bytes sent to other ranks
  int64_t received_bytes = 0;  // network bytes received
  int64_t local_bytes = 0;     // bytes the rank kept (copied locally, not transferred)
  int messages_sent = 0;
  int messages_received = 0;
  double seconds = 0.0;  // on the rank's clock, from the step check to the last write
};

// Moves this rank's part of `plan`: `old_state` is its snapshot under the old plan, `new_params`
// its parameter set under the new plan (nullptr when idle there), filled in place (values, m, v).
// `step`: the optimizer steps completed, equal on every rank (an error otherwise).
Result<MigrationStats> Migrate(const MigrationPlan& plan, int rank, int64_t step,
                               comm::Communicator& world, tensor::Backend& backend,
                               const StateSnapshot& old_state, model::ParameterSet* new_params,
                               RankClock clock = {});

// Checksums of the whole model state of one replica, assembled per full tensor: `hash` is an
// order-independent sum (mod 2^64) over every element of every tensor (values, m and v) of a hash
// of (parameter name, index in the full tensor, which state, the float's bits), so it is equal for
// two placements of the same bits in any plan and differs when any element moves or changes;
// the sums are plain double sums of the elements (equal up to summation order).
struct StateChecksum {
  uint64_t hash = 0;
  double value_sum = 0.0;
  double m_sum = 0.0;
  double v_sum = 0.0;
  int64_t elements = 0;  // elements per state (the model's parameter count)
};

// Collective over `world` (one AllGather): the checksum of each pipeline (replica) of `layout`,
// index = pipeline. `params`: this rank's set (nullptr when idle). Every rank gets the result.
Result<std::vector<StateChecksum>> ChecksumState(const WorldLayout& layout, int rank,
                                                 comm::Communicator& world,
                                                 tensor::Backend& backend,
                                                 const model::ParameterSet* params);

}  // namespace motley::parallel
