// Zero1Layer: ZeRO stage 1 (Rajbhandari et al., 2020) for one layer's parameters inside one
// data-parallel group whose members all hold the same tensors with the same shapes (a "uniform"
// layer group of grad_sync.h: one TP degree across the replicas). The AdamW moments are split
// across the group instead of replicated:
//
//   flatten the layer's tensors in parameter order into n floats; member i of g owns the chunk
//   [offset_i, offset_i + count_i), count_i = n / g (the first n % g members one more);
//   ReduceGradients: reduce-scatter of the gradients -> this member's chunk of the summed gradient;
//   Step:            AdamW on the owned chunk (one segment per parameter it crosses, with that
//                    parameter's weight decay), then all-gather of the updated values, so every
//                    member again holds the whole (identical) layer.
//
// AdamW is element-wise, so the values equal those of the replicated optimizer (the summed
// gradients may differ in the last bit: a reduce-scatter may add in another order than an
// all-reduce). Memory: the owned chunks of m and v (2 n / g floats) instead of 2 n; the
// Parameter::m and ::v tensors of the layer are released (not defined()) while the chunks are
// authoritative.
//
// Moments outside the optimizer (checkpoints, migration, resume) use the full tensors:
//   GatherMoments():  collective; allocates Parameter::m, ::v again and fills them whole;
//   the next Step:    takes its chunks from them ("adopts") and releases them again.
// So a set whose Parameter::m, ::v are allocated (after a load, after GatherMoments, or at
// creation when the set was allocated with moments) is authoritative; the chunks are
// authoritative otherwise. A set allocated without moments (model::StageLayout::
// allocate_moments = false) starts with zero chunks and never holds the whole moments, so the
// device's memory never counts them (the emulated backend's capacity check).
//
// Ownership: references the Backend and the ParameterSet, owns nothing else but the chunks; the
// communicator is borrowed (must outlive it). Thread safety: its rank's thread only; every member
// calls ReduceGradients, Step and GatherMoments in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/parameters.h"
#include "spec/train_spec.h"
#include "tensor/backend.h"

namespace motley::parallel {

class Zero1Layer {
 public:
  // params[i] for i in `indices`: the layer's tensors, in the same order on every member (same
  // names and shapes; checked: a mismatch is an error naming the tensor). `group` has size >= 2.
  // `counts_replicated_in_norm`: whether this member's chunk of tensors that are replicated
  // across TP ranks (norm weights, embedding, head) counts in SquaredNormShare (TP rank 0 only).
  static Result<std::unique_ptr<Zero1Layer>> Create(tensor::Backend& backend,
                                                    model::ParameterSet& params,
                                                    std::vector<size_t> indices,
                                                    comm::Communicator& group,
                                                    bool counts_replicated_in_norm);

  // Reduce-scatter of the layer's gradients (sum) into this member's chunk. Collective.
  Status ReduceGradients();
  // Sum of squares of this member's chunk of the summed gradient (after ReduceGradients), with
  // replicated tensors counted as the constructor says; summed over the world, each logical
  // element counts once.
  double SquaredNormShare() const;
  // AdamW (lr, betas, eps, weight decay of `spec`; bias correction of `step`; gradient read as
  // grad * clip_scale) on the owned chunk, then all-gather of the values. Collective.
  Status Step(const tensor::AdamWParams& adamw, float weight_decay);
  // Makes Parameter::m and ::v whole on every member (see above). Collective.
  Status GatherMoments();

  int64_t numel() const { return numel_; }        // n: the layer's floats
  int64_t chunk_offset() const { return offset_; }
  int64_t chunk_count() const { return count_; }  // floats of each moment this member keeps

 private:
  struct Segment {           // the part of one parameter inside the owned chunk
    size_t param = 0;        // index into the ParameterSet
    int64_t begin = 0;       // first element within the parameter
    int64_t length = 0;      // elements
    int64_t chunk_pos = 0;   // position within the chunk
    tensor::Tensor m, v;     // this segment's moments (length), on the backend
  };

  Zero1Layer(tensor::Backend& backend, model::ParameterSet& params, comm::Communicator& group)
      : backend_(backend), params_(params), group_(group) {}
  void PackValues();   // every parameter's values -> flat_ (host)
  void AdoptMoments(); // chunks from Parameter::m/v (when allocated), which are then released

  tensor::Backend& backend_;
  model::ParameterSet& params_;
  comm::Communicator& group_;
  std::vector<size_t> indices_;
  std::vector<int64_t> counts_;      // per member
  std::vector<bool> counts_in_norm_; // per index in indices_
  int64_t numel_ = 0;
  int64_t offset_ = 0;
  int64_t count_ = 0;
  std::vector<Segment> segments_;
  tensor::Tensor flat_;        // host, numel_: packed gradients, then packed values
  tensor::Tensor chunk_grad_;  // host, count_: this member's summed gradient
  tensor::Tensor chunk_value_; // host, count_
};

}  // namespace motley::parallel
