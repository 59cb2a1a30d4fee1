// What the survivors of a parallel run do when a rank is lost (comm liveness: a rank silent for
// CommOptions::silence_timeout_s, e.g. stopped with SIGSTOP; docs/architecture.md §9, issue 14).
// Internal to the parallel trainer (parallel_rank_loop.cc calls it when a step fails with a lost
// peer).
//
// On every survivor, with the state it holds:
//  1. the survivors get a communicator of their own (comm::Communicator::Survivors: local, no
//     message to the lost rank);
//  2. they all-gather each survivor's last completed step (whose optimizer update it applied) and
//     whether its state is whole (not in the middle of a plan switch);
//  3. when every tensor still has a live holder at one completed step K -- for each stage of a
//     replica shape, a data-parallel replica of that shape (the same stages, block for block)
//     whose stage survived with all its TP ranks at K; a whole surviving replica is one case --
//     and train.checkpoint.dir is set, those stages save the checkpoint of step K (the latest such
//     K; parallel_checkpoint.h over the survivors; skipped when the run already saved step K);
//  4. otherwise nothing is saved, and the error names what is lost (each replica's lost ranks)
//     and the last complete checkpoint to restart from.
// Survivors may stand at two steps (a rank stopped after its last all-reduce message of step K:
// some passed the update of K, some not), hence the per-stage choice.
// The error returned (kUnavailable) is the same on every survivor but for the first part (how this
// rank saw the loss): the lost world ranks and their devices, then what was saved or lost. It is
// handed to Options::report_lost_peer before a last barrier of the survivors, so that every one has
// reported it before any ends the job (under mpiexec the caller ends it with MPI_Abort:
// MPI_Finalize would wait for the lost process forever).
//
// Thread safety: one rank's thread; collective over the survivors.
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "core/status.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "tensor/backend.h"
#include "train/parallel_run_context.h"

namespace motley::train::internal {

// What one rank holds when its step failed.
struct HeldState {
  const parallel::WorldLayout* layout = nullptr;  // the running plan over the world
  parallel::ParallelRank* rank = nullptr;
  tensor::Backend* backend = nullptr;
  int64_t completed_step = 0;   // the last step whose update it applied (first_step - 1: none)
  bool whole = true;            // false in the middle of a plan switch
  std::string last_checkpoint;  // the last checkpoint this run saved or resumed from ("": none)
  int64_t last_checkpoint_step = 0;
};

// `failure` is the error the rank's step failed with. Returns `failure` unchanged when no peer
// was lost (the world has no survivors to form); else the survivors' error (see the top).
Status AfterPeerLost(RunContext& ctx, comm::Communicator& world, const Status& failure,
                     const HeldState& held);

}  // namespace motley::train::internal
