// WorldLayout: where every rank sits in a plan (pipeline, device group, TP rank) and which samples
// of the global batch each pipeline and micro-batch trains on (docs/architecture.md §4). Derived
// from a validated spec::Plan; the same on every rank. The peers of a rank's pipeline transfers
// are the step program's (sched::ChunkStep).
//
// Ranks: world rank r drives the r-th smallest device id the plan uses (so a plan on devices
// {0..N-1} maps rank r to device r). A layout may also be built over a given world (the devices of
// a running job, e.g. after a plan switch, parallel/migration.h): rank r then drives world device
// r, and a rank whose device the plan leaves out is idle (RankInfo::idle(): no stage, no samples;
// it still joins every world collective).
// Interleaved 1F1B (spec::PipelinePlan::chunks = v > 1): a rank sits in one device group i and
// holds the v model chunks of virtual stages i, i + p, ...; stage_of(r, c) is chunk c's.
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
  int stage = 0;      // device group (pipeline stage) 0 .. p - 1: index into the pipeline's stages
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
  // The pipeline of a non-idle rank, and the stage of its model chunk `chunk` (virtual stage
  // chunk * p + device group; chunk 0 without interleaving).
  const spec::PipelinePlan& pipeline_of(int r) const;
  const spec::StagePlan& stage_of(int r, int chunk = 0) const;
  // World ranks of device group s of pipeline p, in TP-rank order.
  const std::vector<int>& stage_ranks(int p, int s) const;

  // samples[p][k]: the samples of micro-batch k of pipeline p; together they tile [0, B).
  const std::vector<std::vector<SampleSlice>>& samples() const { return samples_; }
  int64_t global_batch() const { return global_batch_; }

 private:
  spec::Plan plan_;
  std::vector<RankInfo> ranks_;
  std::vector<std::vector<std::vector<int>>> stage_ranks_;  // [pipeline][group] -> ranks
  std::vector<std::vector<SampleSlice>> samples_;
  int64_t global_batch_ = 0;
  int active_ = 0;
};

}  // namespace motley::parallel
