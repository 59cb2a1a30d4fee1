// See parallel_liveness.h.
#include "train/parallel_liveness.h"

#include <algorithm>
#include <vector>

#include <fmt/core.h>

#include "train/parallel_checkpoint.h"

namespace motley::train::internal {
namespace {

// "world rank 2 (device 2: pipeline 0 stage 1, blocks 2-3)" or "(device 5, idle)"; an
// interleaved rank lists each chunk's blocks ("blocks 1-1, 5-5").
std::string DescribeRank(const parallel::WorldLayout& layout, int q) {
  const parallel::RankInfo& info = layout.rank(q);
  if (info.idle()) return fmt::format("world rank {} (device {}, idle)", q, info.device);
  std::string blocks;
  bool embedding = false;
  bool head = false;
  for (int c = 0; c < layout.pipeline_of(q).chunks; ++c) {
    const spec::StagePlan& st = layout.stage_of(q, c);
    blocks += fmt::format("{}{}-{}", c > 0 ? ", " : "", st.first_block, st.end_block() - 1);
    embedding = embedding || st.has_embedding;
    head = head || st.has_head;
  }
  return fmt::format("world rank {} (device {}: pipeline {} stage {}, blocks {}{}{})", q,
                     info.device, info.pipeline, info.stage, blocks, embedding ? ", embedding" : "",
                     head ? ", head" : "");
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i > 0 ? ", " : "") + parts[i];
  return out;
}

}  // namespace

Status AfterPeerLost(RunContext& ctx, comm::Communicator& world, const Status& failure,
                     const HeldState& held) {
  std::vector<int> lost;
  Result<std::unique_ptr<comm::Communicator>> opened = world.Survivors(&lost);
  if (!opened.ok()) return failure;
  comm::Communicator& survivors = **opened;
  const parallel::WorldLayout& layout = *held.layout;
  const spec::TrainSpec& train = ctx.run->train;
  const int n = layout.size();

  // Each survivor's world rank, completed step and whether its state is whole.
  tensor::Tensor mine = tensor::HostTensor(tensor::Shape{3}, tensor::DType::kF64);
  mine.data<double>()[0] = static_cast<double>(world.rank());
  mine.data<double>()[1] = static_cast<double>(held.completed_step);
  mine.data<double>()[2] = held.whole ? 1.0 : 0.0;
  const int m = survivors.size();
  tensor::Tensor all = tensor::HostTensor(tensor::Shape{3 * m}, tensor::DType::kF64);
  std::vector<std::string> lost_names;
  for (int q : lost) lost_names.push_back(DescribeRank(layout, q));
  const std::string lost_text =
      fmt::format("lost {}", lost_names.empty() ? std::string("a rank") : Join(lost_names));
  Status gathered = survivors.AllGather(all, mine, std::vector<int64_t>(static_cast<size_t>(m), 3));
  if (!gathered.ok()) {
    return Err(StatusCode::kUnavailable,
               "{}; {}; the survivors could not agree on what they hold "
               "({})",
               failure.message(), lost_text, gathered.message());
  }
  std::vector<int> comm_rank_of(static_cast<size_t>(n), -1);
  std::vector<int64_t> completed(static_cast<size_t>(n), -1);
  bool all_whole = true;
  for (int i = 0; i < m; ++i) {
    const double* v = all.data<double>() + 3 * i;
    const auto q = static_cast<size_t>(v[0]);
    comm_rank_of[q] = i;
    completed[q] = static_cast<int64_t>(v[1]);
    all_whole = all_whole && v[2] != 0.0;
  }

  // Every tensor needs a live holder at one completed step K: for each stage position of some
  // replica shape, a replica of that shape (the same stages, block for block) whose stage there
  // survived with all its TP ranks at K. The latest such K wins; stages of different replicas
  // may be combined.
  const spec::Plan& plan = layout.plan();
  auto same_shape = [&](size_t a, size_t b) {
    if (plan.pipelines[a].chunks != plan.pipelines[b].chunks) return false;
    const auto& x = plan.pipelines[a].stages;
    const auto& y = plan.pipelines[b].stages;
    if (x.size() != y.size()) return false;
    for (size_t s = 0; s < x.size(); ++s) {
      if (x[s].first_block != y[s].first_block || x[s].num_blocks != y[s].num_blocks ||
          x[s].has_embedding != y[s].has_embedding || x[s].has_head != y[s].has_head) {
        return false;
      }
    }
    return true;
  };
  // The step device group s of pipeline p (all its model chunks) stands at when all its ranks
  // survived at one step, else -1.
  auto stage_step = [&](size_t p, size_t s) -> int64_t {
    int64_t at = -2;
    for (int q : layout.stage_ranks(static_cast<int>(p), static_cast<int>(s))) {
      const int64_t c = completed[static_cast<size_t>(q)];
      if (comm_rank_of[static_cast<size_t>(q)] < 0 || (at != -2 && at != c)) return -1;
      at = c;
    }
    return at;
  };
  std::vector<int64_t> steps(completed.begin(), completed.end());
  std::sort(steps.rbegin(), steps.rend());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  std::vector<int> stage_pipeline;
  int64_t step = -1;
  for (int64_t k : steps) {
    if (k < 0) break;
    for (size_t ref = 0; ref < plan.pipelines.size() && stage_pipeline.empty(); ++ref) {
      std::vector<int> chosen;
      const auto groups = static_cast<size_t>(plan.pipelines[ref].num_stages());
      for (size_t s = 0; s < groups; ++s) {
        for (size_t p = 0; p < plan.pipelines.size(); ++p) {
          if (same_shape(ref, p) && stage_step(p, s) == k) {
            chosen.push_back(static_cast<int>(p));
            break;
          }
        }
        if (chosen.size() != s + 1) break;
      }
      if (chosen.size() == groups) stage_pipeline = chosen;
    }
    if (!stage_pipeline.empty()) {
      step = k;
      break;
    }
  }
  const bool found = !stage_pipeline.empty();
  std::vector<std::string> gone;  // per replica, what it lost
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    std::vector<std::string> missing;
    for (int s = 0; s < plan.pipelines[p].num_stages(); ++s) {
      for (int q : layout.stage_ranks(static_cast<int>(p), s)) {
        if (comm_rank_of[static_cast<size_t>(q)] < 0) missing.push_back(DescribeRank(layout, q));
      }
    }
    if (!missing.empty()) gone.push_back(fmt::format("pipeline {} lost {}", p, Join(missing)));
  }
  std::vector<std::string> written_by;
  for (size_t s = 0; s < stage_pipeline.size(); ++s) {
    written_by.push_back(fmt::format("stage {} of pipeline {}", s, stage_pipeline[s]));
  }
  const std::string restart =
      held.last_checkpoint.empty()
          ? std::string("no checkpoint was saved before: a restart begins from step 1")
          : fmt::format(
                "the last complete checkpoint is {} (step {}): restart from it with "
                "--resume",
                held.last_checkpoint, held.last_checkpoint_step);
  std::string outcome;
  if (plan.optimizer_sharding == spec::OptimizerSharding::kZero1) {
    outcome = fmt::format(
        "nothing saved: the AdamW moments are sharded (ZeRO-1) over every "
        "replica, the lost rank's shards with it; {}",
        restart);
  } else if (!found || !all_whole) {
    outcome = fmt::format(
        "nothing saved: the survivors do not hold every tensor at one completed step ({}{}); {}",
        gone.empty() ? std::string() : Join(gone) + "; ",
        all_whole ? "the surviving stages stand at different steps"
                  : "a survivor was switching plans",
        restart);
  } else if (train.checkpoint.dir.empty()) {
    outcome = fmt::format(
        "nothing saved: train.checkpoint.dir is not set (the survivors still hold "
        "every tensor of step {}); {}",
        step, restart);
  } else if (step < 1) {
    outcome = fmt::format("no step was completed; {}", restart);
  } else if (step <= held.last_checkpoint_step) {
    outcome = fmt::format("step {} is saved already: {}; restart from it with --resume", step,
                          held.last_checkpoint);
  } else {
    CheckpointWriters writers;
    writers.stage_pipeline = stage_pipeline;
    writers.comm_rank_of = comm_rank_of;
    Result<std::string> saved = SaveParallelCheckpoint(survivors, layout, *held.rank, *held.backend,
                                                       ctx.run->model, train, step, writers);
    outcome = saved.ok() ? fmt::format(
                               "saved the last completed step {} to {} (written by {}): "
                               "restart from it with --resume",
                               step, *saved, Join(written_by))
                         : fmt::format("saving step {} failed ({}); {}", step,
                                       saved.status().message(), restart);
  }
  const Status error =
      Err(StatusCode::kUnavailable, "{}; {}; {}", failure.message(), lost_text, outcome);
  // Reported as the trainer returns it (prefixed with the rank), so that each survivor's line
  // names the rank that prints it and the lost one.
  if (ctx.options->report_lost_peer) {
    ctx.options->report_lost_peer(error.WithContext(fmt::format("rank {}", world.rank())));
  }
  Status done = survivors.Barrier();  // every survivor has reported before any ends the job
  (void)done;
  return error;
}

}  // namespace motley::train::internal
