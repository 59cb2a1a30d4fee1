// TpGroup: the one communication hook the model needs for Megatron tensor parallelism
// (docs/architecture.md §5): a sum all-reduce over the devices of one stage's TP group. model/ must
// not depend on comm/, so the model sees only this interface; parallel/ implements it over a
// comm::Communicator.
//
// Where the block calls it (Megatron-LM's f and g operators, conjugate pairs):
//   forward:  after the row-parallel o_proj and down_proj matmuls (partial sums of the output);
//   backward: on the input gradient of the column-parallel q/k/v and gate/up matmuls.
//
// Errors: AllReduceSum returns nothing. An implementation that fails records the error (sticky)
// and leaves `data` unspecified; its owner checks after each forward/backward and stops the run.
// Ownership: the Stage keeps a non-owning pointer; the TpGroup must outlive it.
// Thread safety: one rank's thread calls it; every rank of the group calls it in the same order.
#pragma once

#include "tensor/tensor.h"

namespace motley::model {

class TpGroup {
 public:
  virtual ~TpGroup() = default;
  virtual int rank() const = 0;  // this device's TP rank, 0..size()-1
  virtual int size() const = 0;  // TP degree
  // data (any shape, f32) = sum of data over the group's ranks, in place; identical on every rank.
  virtual void AllReduceSum(tensor::Tensor& data) = 0;
};

}  // namespace motley::model
