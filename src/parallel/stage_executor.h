// StageExecutor: runs one rank's action list of a pipeline schedule (sched/schedule.h) for one
// training step, over the world communicator (docs/architecture.md §3 rule 2: the list the
// simulator replays is the list executed here).
//
//  - Forward / Backward: the rank's model::Stage on micro-batch k. The first stage reads tokens
//    from the caller's host batch, the last stage computes the loss (token sum) and starts the
//    backward with loss_scale = 1 / tokens in the global batch (docs/architecture.md §4).
//  - A maximal run of Send*/Recv* actions is one batch: every transfer is posted at once
//    (ISend/IRecv), then all are waited for (Megatron's batched isend/irecv). A send goes to every
//    receiver the rank serves and a receive comes from one sender (world_layout.h); tags encode the
//    micro-batch and the direction: tag = 2 * k + (0 forward activation | 1 backward gradient).
//  - DpSync / OptimizerStep call the caller's hooks.
// Per-action times on the rank's clock (rank_clock.h: emulated time on an emulated cluster, wall
// time otherwise) are summed into StageTimes, and optionally recorded as trace events.
//
// Ownership: references the layout, Stage and communicator (must outlive it); owns its receive
// buffers. Thread safety: used by its rank's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/stage.h"
#include "parallel/comm_tp_group.h"
#include "parallel/rank_clock.h"
#include "parallel/world_layout.h"
#include "sched/schedule.h"

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

  // `actions`: this rank's stage list; seq_len: T. `tp` (may be nullptr) is checked after every
  // compute action. `clock` times the actions.
  StageExecutor(const WorldLayout& layout, int rank, model::Stage& stage,
                comm::Communicator& world, const CommTpGroup* tp,
                std::vector<sched::Action> actions, int64_t seq_len, RankClock clock = {});

  // inputs (first stage) and targets (last stage): this pipeline's samples, (m * b, T) i32 in
  // micro-batch order; unused spans may be empty. Returns the sum of token losses of this
  // pipeline (last stage), 0 elsewhere. `trace` (may be nullptr) receives one event per action.
  Result<double> Run(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                     float loss_scale, const Hooks& hooks, StageTimes& times,
                     std::vector<TraceEvent>* trace);
  // The loss sum of the Run in progress so far (complete once every Forward ran, e.g. inside the
  // DpSync and OptimizerStep hooks).
  double running_loss_sum() const { return loss_sum_; }

  // Evaluation (validation loss): every micro-batch forward only, in order, each receiving its
  // activation from the previous stage and sending its output to the next (one transfer at a
  // time: RF k, F k, SF k), its activations released right after; no gradients, no hooks. Inputs
  // as for Run. Returns the sum of token losses of this pipeline (last stage), 0 elsewhere.
  Result<double> Evaluate(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                          StageTimes& times);

 private:
  // A (b, T, C) transfer buffer from the pool (allocated when none is free; the pool never
  // shrinks, so it reaches sched::PipelineBuffersHeld buffers, the count the memory model uses).
  tensor::Tensor TakeBuffer();
  void GiveBack(tensor::Tensor t) { free_.push_back(std::move(t)); }
  // Posts actions[begin, end) (all communication) together, then waits for all of them.
  Status RunBatch(const std::vector<sched::Action>& actions, size_t begin, size_t end,
                  StageTimes& times);
  // The input of micro-batch k's forward: the tokens (first stage, copied to the device) or the
  // received activation.
  tensor::Tensor ForwardInput(int64_t k, std::span<const int32_t> inputs);
  // Copies micro-batch k's targets to the device (last stage).
  void LoadTargets(int64_t k, std::span<const int32_t> targets);
  // Micro-batch k's forward (training and evaluation alike): the last stage returns its loss, the
  // others keep the output for the send and return 0; the received activation goes back to the
  // free buffers.
  double ForwardMicroBatch(int64_t k, std::span<const int32_t> inputs,
                           std::span<const int32_t> targets);
  Status CheckInputSizes(std::span<const int32_t> inputs, std::span<const int32_t> targets) const;

  const WorldLayout& layout_;
  int rank_;
  model::Stage& stage_;
  comm::Communicator& world_;
  const CommTpGroup* tp_;
  RankClock clock_;
  std::vector<sched::Action> actions_;
  int64_t b_;  // micro-batch size
  int64_t t_;
  bool first_;
  bool last_;
  int forward_source_;
  std::vector<int> forward_destinations_;
  int backward_source_;
  std::vector<int> backward_destinations_;

  tensor::Tensor tokens_;   // (b, T) i32, first stage
  tensor::Tensor targets_;  // (b, T) i32, last stage
  std::map<int64_t, tensor::Tensor> outputs_;       // Forward outputs to send, by micro-batch
  std::map<int64_t, tensor::Tensor> input_grads_;   // Backward results to send
  std::map<int64_t, tensor::Tensor> received_act_;  // received activations
  std::map<int64_t, tensor::Tensor> received_grad_; // received output gradients
  std::vector<tensor::Tensor> free_;                // (b, T, C) buffers to reuse
  double loss_sum_ = 0.0;
};

// Tag of a pipeline transfer.
inline int PipelineTag(int64_t micro_batch, bool backward) {
  return static_cast<int>(2 * micro_batch + (backward ? 1 : 0));
}

}  // namespace motley::parallel
