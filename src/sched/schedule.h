// Pipeline schedules as data (docs/architecture.md §3 rule 2): for each stage of one pipeline, the
// ordered list of actions it runs in one training step. The runtime's stage executor and the
// simulator both interpret the same lists, so prediction and execution cannot drift apart.
//
// Execution contract (what CheckSchedule verifies and what executors must implement):
//  - Compute actions (Forward, Backward, DpSync, OptimizerStep) run in list order.
//  - A maximal run of consecutive communication actions (Send*/Recv*) is one batch: all of its
//    operations are posted together and the stage waits until every one has matched its conjugate
//    on the neighbour stage (Megatron's batched isend/irecv: send_forward_recv_backward, ...).
//    A send completes only when the neighbour has posted the matching receive (rendezvous), so
//    no buffering is assumed.
//  - Messages carry the micro-batch id; SendForward(k) on stage i matches RecvForward(k) on stage
//    i+1, SendBackward(k) on stage i matches RecvBackward(k) on stage i-1.
//  - Interleaved 1F1B (Narayanan et al. SC'21 §2.2): each of the p devices holds v model chunks;
//    chunk c of device i is virtual stage s = c * p + i of a pipeline of p * v virtual stages, and
//    actions carry their chunk. SendForward(k, c) on device i matches RecvForward(k) on virtual
//    stage s + 1 (device (i + 1) mod p, chunk c + 1 when i = p - 1), SendBackward on s - 1; only
//    virtual stage 0 has no previous stage and only p * v - 1 no next. With v = 1 this is plain
//    1F1B and every chunk is 0.
// Plain value types; functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "spec/plan.h"

namespace motley::sched {

enum class ActionKind {
  kForward,        // forward of micro_batch on this stage
  kBackward,       // backward of micro_batch on this stage
  kSendForward,    // activation of micro_batch to stage + 1
  kRecvForward,    // activation of micro_batch from stage - 1
  kSendBackward,   // input gradient of micro_batch to stage - 1
  kRecvBackward,   // output gradient of micro_batch from stage + 1
  kDpSync,         // data-parallel gradient reduction of this stage's parameters (micro_batch -1)
  kOptimizerStep,  // optimizer update of this stage's parameters (micro_batch -1)
};

std::string_view ActionKindName(ActionKind kind);  // "F", "B", "SF", "RF", "SB", "RB", "DP", "OPT"
bool IsCommunication(ActionKind kind);             // Send*/Recv*

struct Action {
  ActionKind kind = ActionKind::kForward;
  int64_t micro_batch = -1;  // -1 for DpSync / OptimizerStep
  int chunk = 0;             // model chunk of the device (interleaved 1F1B); 0 otherwise

  bool operator==(const Action&) const = default;
};

// "F3", "RB0", "OPT"; a chunk above 0 is appended: "F3c1".
std::string ActionToString(const Action& action);

struct Schedule {
  spec::PipelineSchedule kind = spec::PipelineSchedule::k1F1B;
  int num_stages = 0;             // p: devices (pipeline stages) of the pipeline
  int64_t num_micro_batches = 0;  // m
  int num_chunks = 1;             // v: model chunks per device (interleaved 1F1B when > 1)
  std::vector<std::vector<Action>> stages;  // stages[i]: the actions of device i, in order

  int num_virtual_stages() const { return num_stages * num_chunks; }
};

struct ScheduleOptions {
  // Append DpSync then OptimizerStep to every stage's list after its last backward.
  bool with_step_actions = false;
  // v > 1: interleaved 1F1B with v model chunks per device (kind must be 1F1B, p >= 2).
  int chunks = 1;
};

// Builds the action lists of one pipeline of p stages running m micro-batches.
//  - 1F1B (PipeDream-flush, Megatron non-interleaved): stage i runs min(p - i - 1, m) warm-up
//    forwards, then alternates one forward and one backward, then the remaining backwards.
//  - GPipe: all m forwards, then all m backwards (micro-batch order 0..m-1).
//  - Interleaved 1F1B (options.chunks = v > 1; Narayanan et al. SC'21, Megatron-LM's
//    interleaved schedule): micro-batches go in groups of p; each device runs a group's forwards
//    through chunk 0, then chunk 1, ..., then the next group, and the backwards in the same order
//    with the chunks reversed. Device i runs min(m v, 2 (p - i - 1) + (v - 1) p) warm-up
//    forwards, then alternates one forward and one backward, then the remaining backwards; each
//    compute is followed by one batch sending its result and receiving the next forward's and
//    backward's inputs (Megatron's send_forward_backward_recv_forward_backward).
//    Micro-batch counts (spec::InterleavedMicroBatchesOk, the plan rule's): multiples of p, as
//    Megatron requires, and, generalising it, every m < 2p: one group of m (all forwards first when
//    m <= p, warm-up 2 (p - i - 1) + (v - 1) m otherwise). Other m are refused: with groups of
//    unequal size the transfers across the wrap (device p - 1 to device 0) meet in different
//    batches on the two sides and the lists deadlock (CheckSchedule finds it), so a planner that
//    water-fills micro-batches rounds a pipeline's m to an accepted count.
// m < p is accepted (1F1B then never reaches a steady state on the early stages). Errors for
// p < 1, m < 1, chunks < 1, chunks > 1 with GPipe, a single stage or an m it does not accept.
Result<Schedule> BuildSchedule(spec::PipelineSchedule kind, int num_stages,
                               int64_t num_micro_batches, const ScheduleOptions& options = {});

// Checks completeness and deadlock freedom: every micro-batch forwarded and backwarded exactly
// once on every stage, forward before backward, first/last stages have no receive/send across the
// pipeline ends (virtual stages under interleaving: every chunk of every micro-batch), every send
// has the conjugate receive on the neighbour, step actions (if any) come
// once each after the last backward, and a simulation of the execution contract above completes
// on every stage. Errors name the stage and action ("stage 2 action 5 (RB1): ...").
Status CheckSchedule(const Schedule& schedule);

// The largest number of micro-batches whose forward has run and backward has not, on stage i
// (activations held at once; under interleaving, (micro-batch, chunk) pairs, each holding one
// chunk's activations); computed from the list. chunk >= 0: only that model chunk's micro-batches
// (the activation slots the chunk's model::Stage allocates).
int64_t InFlightMicroBatches(const Schedule& schedule, int stage, int chunk = -1);
// The largest number of activation-sized (b, T, C) transfer buffers stage i's executor holds at
// once (parallel/stage_executor.cc keeps a pool of that many): a RecvForward's buffer from its
// batch until the forward has consumed it, a RecvBackward's until the backward has, and on every
// stage but the first a copy of each backward's input gradient until its SendBackward's batch
// completes (the received gradient is released before the copy is taken). Computed from the list.
int64_t PipelineBuffersHeld(const Schedule& schedule, int stage);
// Closed form for 1F1B: min(p - i, m) (Narayanan et al. SC'21).
int64_t OneFOneBInFlight(int num_stages, int stage, int64_t num_micro_batches);
// InFlightMicroBatches of a 1F1B or GPipe list without interleaving, in closed form (tested equal
// to the list's count): OneFOneBInFlight for 1F1B, every micro-batch for GPipe. For memory checks
// that must not build the list (a search checks many shapes it never walks).
int64_t InFlightWithoutInterleaving(spec::PipelineSchedule kind, int num_stages, int stage,
                                    int64_t num_micro_batches);
// Warm-up forwards of device i under interleaved 1F1B with v chunks (the builder's rule above);
// its in-flight (micro-batch, chunk) pairs are one more, capped at m v.
int64_t InterleavedWarmup(int num_stages, int stage, int64_t num_micro_batches, int chunks);

// One line per stage, e.g. "stage 0: F0 SF0 F1 SF1 RB0 B0 ...", for logs and test failures.
std::string ScheduleToString(const Schedule& schedule);

}  // namespace motley::sched
