// CommTpGroup: model::TpGroup (model/tp_group.h) over a comm::Communicator holding exactly the
// ranks of one stage's TP group, in TP-rank order. The model calls AllReduceSum from inside its
// forward and backward, which cannot return a Status; the first failure is kept (sticky), later
// calls do nothing, and the owner checks status() after each compute action. It also sums the
// time spent in its all-reduces (the TP communication of the stage) on the rank's clock
// (rank_clock.h: emulated time on an emulated cluster, wall time otherwise).
//
// Ownership: owns its communicator. Thread safety: used by its rank's thread only.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/tp_group.h"
#include "parallel/rank_clock.h"

namespace motley::parallel {

class CommTpGroup final : public model::TpGroup {
 public:
  explicit CommTpGroup(std::unique_ptr<comm::Communicator> comm, RankClock clock = {})
      : comm_(std::move(comm)), clock_(clock) {}

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  void AllReduceSum(tensor::Tensor& data) override;

  // Ok, or the first error of an all-reduce.
  const Status& status() const { return status_; }
  // Seconds (rank clock) spent in AllReduceSum since construction.
  double comm_seconds() const { return comm_s_; }

 private:
  std::unique_ptr<comm::Communicator> comm_;
  RankClock clock_;
  Status status_;
  double comm_s_ = 0.0;
};

}  // namespace motley::parallel
