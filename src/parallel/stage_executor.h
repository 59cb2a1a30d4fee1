// StageExecutor: runs one rank's action list of a pipeline schedule (sched/schedule.h) for one
// training step, over the world communicator (docs/architecture.md §3 rule 2: the list the
// simulator replays is the list executed here).
//
//  - The rank holds one model::Stage per model chunk (one without interleaving, v under
//    interleaved 1F1B); an action's `chunk` picks it. Its peers are the step program's
//    (sched::ChunkStep): the chunk of virtual stage 0 reads tokens from the caller's host batch
//    (it has no forward source), the chunk of the last virtual stage (no backward source) computes
//    the loss (token sum) and starts the backward with loss_scale = 1 / tokens in the global batch
//    (docs/architecture.md §4).
//  - A maximal run of Send*/Recv* actions is one batch: every transfer is posted at once
//    (ISend/IRecv), then all are waited for (Megatron's batched isend/irecv). A send goes to every
//    receiver of its chunk and a receive comes from its chunk's one sender; the tag names the
//    micro-batch, the virtual-stage boundary and the direction (PipelineTag).
//  - DpSync / OptimizerStep call the caller's hooks.
// Per-action times on the rank's clock (rank_clock.h: emulated time on an emulated cluster, wall
// time otherwise) are summed into StageTimes, and optionally recorded as trace events.
//
// Ownership: references the Stages and communicators (must outlive it); owns its receive
// buffers. Thread safety: used by its rank's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/stage.h"
#include "parallel/comm_tp_group.h"
#include "parallel/rank_clock.h"
#include "sched/schedule.h"
#include "sched/step_program.h"
#include "spec/plan.h"

namespace motley::parallel {

// Seconds (rank clock) one rank spent per kind of work in a step.
struct StageTimes {
  double forward_s = 0.0;    // Forward actions (including their TP all-reduces)
  double backward_s = 0.0;   // Backward actions (including their TP all-reduces)
  double p2p_s = 0.0;        // pipeline transfer batches: posting, transfer and waiting
  double tp_comm_s = 0.0;    // TP all-reduces (a part of forward_s + backward_s)
  double dp_sync_s = 0.0;    // data-parallel gradient reduction
  double optimizer_s = 0.0;  // global-norm reduction, clipping and AdamW
  double step_s = 0.0;       // the whole step on this rank
};

// One executed action (or transfer batch) for a Chrome trace.
struct TraceEvent {
  std::string name;      // "F3", "B0", "SF3+RB0", "DP", "OPT"
  double start_s = 0.0;  // rank clock (virtual time, or steady seconds since the run's origin)
  double dur_s = 0.0;
};

class StageExecutor {
 public:
  struct Hooks {
    std::function<Status()> dp_sync;
    std::function<Status()> optimizer_step;
  };

  // `step`: this rank's step program entry (its chunks' peers); `pipeline`: its pipeline's plan
  // (micro-batches, p, v); `chunks`: the rank's Stage of each model chunk, by chunk (all of one
  // micro-batch shape (b, T)). `actions`: the rank's list. `tp` (may be nullptr) is checked after
  // every compute action. `clock` times the actions.
  StageExecutor(const sched::RankStep& step, const spec::PipelinePlan& pipeline,
                std::vector<model::Stage*> chunks, comm::Communicator& world, const CommTpGroup* tp,
                std::vector<sched::Action> actions, RankClock clock = {});

  // inputs (chunk of virtual stage 0) and targets (last virtual stage): this pipeline's samples,
  // (m * b, T) i32 in micro-batch order; unused spans may be empty. Returns the sum of token
  // losses of this pipeline (last virtual stage), 0 elsewhere. `trace` (may be nullptr) receives
  // one event per action.
  Result<double> Run(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                     float loss_scale, const Hooks& hooks, StageTimes& times,
                     std::vector<TraceEvent>* trace);
  // The loss sum of the Run in progress so far (complete once every Forward ran, e.g. inside the
  // DpSync and OptimizerStep hooks).
  double running_loss_sum() const { return loss_sum_; }

  // Evaluation (validation loss): every micro-batch forward only, in order, and per micro-batch
  // each chunk in order, receiving its activation from the previous virtual stage and sending its
  // output to the next (one transfer at a time: RF k, F k, SF k), its activations released right
  // after; no gradients, no hooks. Inputs as for Run. Returns the sum of token losses of this
  // pipeline (last virtual stage), 0 elsewhere.
  Result<double> Evaluate(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                          StageTimes& times);

 private:
  // What the rank keeps per model chunk.
  struct Chunk {
    model::Stage* stage = nullptr;
    sched::ChunkStep peers;
    bool first = false;  // virtual stage 0: reads the tokens
    bool last = false;   // last virtual stage: computes the loss
  };
  // Per (micro-batch, chunk).
  using Key = std::pair<int64_t, int>;

  // A (b, T, C) transfer buffer from the pool (allocated when none is free; the pool never
  // shrinks, so it reaches sched::PipelineBuffersHeld buffers, the count the memory model uses).
  tensor::Tensor TakeBuffer();
  void GiveBack(tensor::Tensor t) { free_.push_back(std::move(t)); }
  // The tag of a transfer across the boundary after virtual stage `boundary`.
  int Tag(int64_t micro_batch, int boundary, bool backward) const;
  // Posts actions[begin, end) (all communication) together, then waits for all of them.
  Status RunBatch(const std::vector<sched::Action>& actions, size_t begin, size_t end,
                  StageTimes& times);
  // The input of micro-batch k's forward on chunk c: the tokens (virtual stage 0, copied to the
  // device) or the received activation.
  tensor::Tensor ForwardInput(int64_t k, int c, std::span<const int32_t> inputs);
  // Copies micro-batch k's targets to the device (last virtual stage).
  void LoadTargets(int64_t k, std::span<const int32_t> targets);
  // Micro-batch k's forward on chunk c (training and evaluation alike): the last virtual stage
  // returns its loss, the others keep the output for the send and return 0; the received
  // activation goes back to the free buffers.
  double ForwardMicroBatch(int64_t k, int c, std::span<const int32_t> inputs,
                           std::span<const int32_t> targets);
  // Micro-batch k's backward on chunk c; keeps a copy of the input gradient for the send.
  void BackwardMicroBatch(int64_t k, int c, float loss_scale);
  Status CheckInputSizes(std::span<const int32_t> inputs, std::span<const int32_t> targets) const;
  bool holds_first() const { return chunks_.front().first; }
  bool holds_last() const { return chunks_.back().last; }

  int rank_;
  std::vector<Chunk> chunks_;
  comm::Communicator& world_;
  const CommTpGroup* tp_;
  RankClock clock_;
  std::vector<sched::Action> actions_;
  int64_t m_;  // micro-batches per step
  int p_;      // device groups of the pipeline
  int v_;      // model chunks per device group
  int64_t b_;  // micro-batch size
  int64_t t_;
  int64_t hidden_;

  tensor::Tensor tokens_;                        // (b, T) i32, virtual stage 0
  tensor::Tensor targets_;                       // (b, T) i32, last virtual stage
  std::map<Key, tensor::Tensor> outputs_;        // Forward outputs to send
  std::map<Key, tensor::Tensor> input_grads_;    // Backward results to send
  std::map<Key, tensor::Tensor> received_act_;   // received activations
  std::map<Key, tensor::Tensor> received_grad_;  // received output gradients
  std::vector<tensor::Tensor> free_;             // (b, T, C) buffers to reuse
  double loss_sum_ = 0.0;
};

// Tag of a pipeline transfer of micro-batch k across the boundary after virtual stage
// `boundary` (between it and the next) of a pipeline of p device groups and v chunks each:
// 2 (k v + boundary / p) + (0 forward activation | 1 backward gradient). Between one ordered pair
// of ranks and one direction, the boundaries a step crosses differ in boundary / p, so tags are
// unique; without interleaving the tag is 2 k + direction.
inline int PipelineTag(int64_t micro_batch, int boundary, int p, int v, bool backward) {
  return static_cast<int>(2 * (micro_batch * v + boundary / p) + (backward ? 1 : 0));
}

}  // namespace motley::parallel
