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

  bool operator==(const Action&) const = default;
};

// "F3", "RB0", "OPT".
std::string ActionToString(const Action& action);

struct Schedule {
  spec::PipelineSchedule kind = spec::PipelineSchedule::k1F1B;
  int num_stages = 0;             // p
  int64_t num_micro_batches = 0;  // m
  std::vector<std::vector<Action>> stages;  // stages[i]: the actions of stage i, in order
};

struct ScheduleOptions {
  // Append DpSync then OptimizerStep to every stage's list after its last backward.
  bool with_step_actions = false;
};

// Builds the action lists of one pipeline of p stages running m micro-batches.
//  - 1F1B (PipeDream-flush, Megatron non-interleaved): stage i runs min(p - i - 1, m) warm-up
//    forwards, then alternates one forward and one backward, then the remaining backwards.
//  - GPipe: all m forwards, then all m backwards (micro-batch order 0..m-1).
// m < p is accepted (1F1B then never reaches a steady state on the early stages). Errors for
// p < 1 or m < 1.
Result<Schedule> BuildSchedule(spec::PipelineSchedule kind, int num_stages,
                               int64_t num_micro_batches, const ScheduleOptions& options = {});

// Checks completeness and deadlock freedom: every micro-batch forwarded and backwarded exactly
// once on every stage, forward before backward, first/last stages have no receive/send across the
// pipeline ends, every send has the conjugate receive on the neighbour, step actions (if any) come
// once each after the last backward, and a simulation of the execution contract above completes
// on every stage. Errors name the stage and action ("stage 2 action 5 (RB1): ...").
Status CheckSchedule(const Schedule& schedule);

// The largest number of micro-batches whose forward has run and backward has not, on stage i
// (activations held at once); computed from the list.
int64_t InFlightMicroBatches(const Schedule& schedule, int stage);
// The largest number of activation-sized (b, T, C) transfer buffers stage i's executor holds at
// once (parallel/stage_executor.cc keeps a pool of that many): a RecvForward's buffer from its
// batch until the forward has consumed it, a RecvBackward's until the backward has, and on every
// stage but the first a copy of each backward's input gradient until its SendBackward's batch
// completes (the received gradient is released before the copy is taken). Computed from the list.
int64_t PipelineBuffersHeld(const Schedule& schedule, int stage);
// Closed form for 1F1B: min(p - i, m) (Narayanan et al. SC'21).
int64_t OneFOneBInFlight(int num_stages, int stage, int64_t num_micro_batches);

// One line per stage, e.g. "stage 0: F0 SF0 F1 SF1 RB0 B0 ...", for logs and test failures.
std::string ScheduleToString(const Schedule& schedule);

}  // namespace motley::sched
