// See world_layout.h.
#include "parallel/world_layout.h"

#include <map>

#include "core/check.h"
#include "spec/plan_topology.h"

namespace motley::parallel {

Result<WorldLayout> WorldLayout::Build(const spec::Plan& plan) {
  return Build(plan, spec::PlanDevices(plan));
}

Result<WorldLayout> WorldLayout::Build(const spec::Plan& plan,
                                       const std::vector<int>& world_devices) {
  const std::string where = plan.source.empty() ? "plan" : plan.source;
  if (plan.pipelines.empty()) return Err("{}: pipelines: the plan has no pipeline", where);
  WorldLayout w;
  w.plan_ = plan;
  std::map<int, RankInfo> by_device;
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const spec::PipelinePlan& pipe = plan.pipelines[p];
    if (pipe.stages.empty()) return Err("{}: pipelines[{}].stages: no stage", where, p);
    if (pipe.chunks < 1 || pipe.stages.size() % static_cast<size_t>(pipe.chunks) != 0) {
      return Err("{}: pipelines[{}]: chunks {} does not divide its {} stages", where, p,
                 pipe.chunks, pipe.stages.size());
    }
    if (pipe.micro_batches < 1 || pipe.micro_batch_size < 1) {
      return Err("{}: pipelines[{}]: micro_batches and micro_batch_size must be >= 1", where, p);
    }
    // Device groups: the first p stages (an interleaved pipeline's later virtual stages repeat
    // them, spec::PipelinePlan).
    for (size_t s = 0; s < static_cast<size_t>(pipe.num_stages()); ++s) {
      const spec::StagePlan& stage = pipe.stages[s];
      if (stage.devices.empty()) {
        return Err("{}: pipelines[{}].stages[{}].devices: no device", where, p, s);
      }
      for (size_t j = 0; j < stage.devices.size(); ++j) {
        const int device = stage.devices[j];
        if (by_device.count(device) != 0) {
          return Err("{}: pipelines[{}].stages[{}].devices: device {} is used twice", where, p, s,
                     device);
        }
        by_device[device] = RankInfo{0, device, static_cast<int>(p), static_cast<int>(s),
                                     static_cast<int>(j), static_cast<int>(stage.devices.size())};
      }
    }
  }
  w.stage_ranks_.resize(plan.pipelines.size());
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    w.stage_ranks_[p].resize(static_cast<size_t>(plan.pipelines[p].num_stages()));
    for (size_t s = 0; s < w.stage_ranks_[p].size(); ++s) {
      w.stage_ranks_[p][s].resize(plan.pipelines[p].stages[s].devices.size());
    }
  }
  for (size_t r = 0; r < world_devices.size(); ++r) {
    if (r > 0 && world_devices[r] <= world_devices[r - 1]) {
      return Err("{}: the world's devices must be distinct and ascending", where);
    }
    const int device = world_devices[r];
    auto it = by_device.find(device);
    RankInfo info{static_cast<int>(r), device, -1, -1, -1, 1};
    if (it != by_device.end()) {
      info = it->second;
      info.rank = static_cast<int>(r);
      w.stage_ranks_[static_cast<size_t>(info.pipeline)][static_cast<size_t>(info.stage)]
                    [static_cast<size_t>(info.tp_rank)] = info.rank;
      ++w.active_;
      by_device.erase(it);
    }
    w.ranks_.push_back(info);
  }
  if (!by_device.empty()) {
    return Err("{}: device {} is not one of the {} devices of the running world", where,
               by_device.begin()->first, world_devices.size());
  }
  int64_t next = 0;
  w.samples_.resize(plan.pipelines.size());
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const spec::PipelinePlan& pipe = plan.pipelines[p];
    for (int64_t k = 0; k < pipe.micro_batches; ++k) {
      w.samples_[p].push_back(SampleSlice{next, pipe.micro_batch_size});
      next += pipe.micro_batch_size;
    }
  }
  w.global_batch_ = next;
  return w;
}

std::vector<int> WorldLayout::devices() const {
  std::vector<int> out;
  for (const RankInfo& info : ranks_) out.push_back(info.device);
  return out;
}

const spec::PipelinePlan& WorldLayout::pipeline_of(int r) const {
  MOTLEY_CHECK(!rank(r).idle(), "WorldLayout: rank is idle in this plan");
  return plan_.pipelines[static_cast<size_t>(rank(r).pipeline)];
}

const spec::StagePlan& WorldLayout::stage_of(int r, int chunk) const {
  const spec::PipelinePlan& pipe = pipeline_of(r);
  MOTLEY_CHECK(chunk >= 0 && chunk < pipe.chunks, "WorldLayout: no such model chunk");
  return pipe.stages[static_cast<size_t>(pipe.virtual_stage(rank(r).stage, chunk))];
}

const std::vector<int>& WorldLayout::stage_ranks(int p, int s) const {
  return stage_ranks_.at(static_cast<size_t>(p)).at(static_cast<size_t>(s));
}

}  // namespace motley::parallel
