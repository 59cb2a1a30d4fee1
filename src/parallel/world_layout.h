// WorldLayout: where every rank sits in a plan (pipeline, stage, TP rank), the peers of its
// pipeline transfers, and which samples of the global batch each pipeline and micro-batch trains
// on (docs/architecture.md §4). Derived from a validated spec::Plan; the same on every rank.
//
// Ranks: world rank r drives the r-th smallest device id the plan uses (so a plan on devices
// {0..N-1} maps rank r to device r). A layout may also be built over a given world (the devices of
// a running job, e.g. after a plan switch, parallel/migration.h): rank r then drives world device
// r, and a rank whose device the plan leaves out is idle (RankInfo::idle(): no stage, no samples;
// it still joins every world collective).
// Transfers between stages of different TP degrees: activations and gradients are replicated on
// every TP rank of a stage, so TP rank j of the receiving stage receives from TP rank
// (j mod d_sender) of the sending stage, and each sender sends to every receiver it so serves.
// Samples: pipelines take consecutive ranges of the global batch in plan order; micro-batch k of
// pipeline p is the k-th run of micro_batch_size samples of its range.
// Plain value types; functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "spec/plan.h"

namespace motley::parallel {

struct RankInfo {
  int rank = 0;       // world rank
  int device = 0;     // global device id of the cluster spec
  int pipeline = 0;   // index into plan.pipelines
  int stage = 0;      // index into the pipeline's stages
  int tp_rank = 0;    // index into the stage's devices
  int tp_degree = 1;

  // Left out of the plan (a layout over a given world only): pipeline, stage and tp_rank are -1.
  bool idle() const { return pipeline < 0; }
};

// A contiguous range of sample indices of the global batch.
struct SampleSlice {
  int64_t begin = 0;
  int64_t count = 0;
};

class WorldLayout {
 public:
  // Errors when the plan is structurally unusable (no pipelines, a device used twice, an empty
  // stage, a micro-batch count or size below 1); run spec::ValidatePlan first for the full check.
  static Result<WorldLayout> Build(const spec::Plan& plan);
  // The plan over a fixed world: world rank r drives world_devices[r] (ascending, distinct ids).
  // Errors also when the plan uses a device outside the world.
  static Result<WorldLayout> Build(const spec::Plan& plan, const std::vector<int>& world_devices);

  int size() const { return static_cast<int>(ranks_.size()); }
  // Ranks that hold a stage (size() minus the idle ones).
  int active_size() const { return active_; }
  // Device of each world rank, ascending.
  std::vector<int> devices() const;
  const RankInfo& rank(int r) const { return ranks_.at(static_cast<size_t>(r)); }
  const std::vector<RankInfo>& ranks() const { return ranks_; }
  const spec::Plan& plan() const { return plan_; }
  // The stage and pipeline of a non-idle rank.
  const spec::StagePlan& stage_of(int r) const;
  const spec::PipelinePlan& pipeline_of(int r) const;
  // World ranks of stage s of pipeline p, in TP-rank order.
  const std::vector<int>& stage_ranks(int p, int s) const;

  // Peers of non-idle rank r's pipeline transfers (empty across the pipeline's ends).
  int ForwardSource(int r) const;                    // sender of r's activations; -1 on stage 0
  std::vector<int> ForwardDestinations(int r) const;  // receivers of r's activations
  int BackwardSource(int r) const;                   // sender of r's output gradient; -1 last
  std::vector<int> BackwardDestinations(int r) const;  // receivers of r's input gradient

  // samples[p][k]: the samples of micro-batch k of pipeline p; together they tile [0, B).
  const std::vector<std::vector<SampleSlice>>& samples() const { return samples_; }
  int64_t global_batch() const { return global_batch_; }

 private:
  spec::Plan plan_;
  std::vector<RankInfo> ranks_;
  std::vector<std::vector<std::vector<int>>> stage_ranks_;  // [pipeline][stage] -> ranks
  std::vector<std::vector<SampleSlice>> samples_;
  int64_t global_batch_ = 0;
  int active_ = 0;
};

}  // namespace motley::parallel
