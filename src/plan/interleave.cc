// See interleave.h.
#include "plan/interleave.h"

#include <utility>

#include <fmt/format.h>

#include "core/check.h"

namespace motley::plan {

bool CanInterleave(const spec::PipelinePlan& pipe, int chunks) {
  if (chunks < 2 || pipe.chunks != 1) return false;
  const int p = pipe.num_stages();
  if (p < 2 || pipe.micro_batches < p || !spec::InterleavedMicroBatchesOk(p, pipe.micro_batches)) {
    return false;
  }
  for (const spec::StagePlan& st : pipe.stages) {
    if (st.num_blocks < chunks) return false;
  }
  return true;
}

spec::PipelinePlan InterleavePipeline(const spec::PipelinePlan& pipe, int chunks) {
  MOTLEY_CHECK(CanInterleave(pipe, chunks), "InterleavePipeline: the pipeline cannot interleave");
  const int p = pipe.num_stages();
  spec::PipelinePlan out = pipe;
  out.chunks = chunks;
  out.stages.clear();
  for (int c = 0; c < chunks; ++c) {
    for (int i = 0; i < p; ++i) {
      spec::StagePlan st = pipe.stages[static_cast<size_t>(i)];
      const int64_t n = st.num_blocks;
      st.num_blocks = n / chunks + (c < n % chunks ? 1 : 0);
      st.has_embedding = c == 0 && i == 0;
      st.has_head = c + 1 == chunks && i + 1 == p;
      out.stages.push_back(std::move(st));
    }
  }
  spec::RenumberBlocks(&out);
  return out;
}

bool InterleavedWhereAllowed(const spec::Plan& plan, int chunks, spec::Plan* out) {
  if (plan.schedule != spec::PipelineSchedule::k1F1B) return false;
  spec::Plan result = plan;
  bool any = false;
  for (spec::PipelinePlan& pipe : result.pipelines) {
    if (!CanInterleave(pipe, chunks)) continue;
    pipe = InterleavePipeline(pipe, chunks);
    any = true;
  }
  if (any) *out = std::move(result);
  return any;
}

spec::Plan MicroBatchesForInterleaving(const spec::Plan& plan,
                                       const std::vector<double>& pipeline_time_s, int chunks) {
  MOTLEY_CHECK(pipeline_time_s.size() == plan.pipelines.size(), "one time per pipeline");
  spec::Plan out = plan;
  const size_t n = out.pipelines.size();
  std::vector<double> per(n);
  std::vector<bool> can(n);
  int64_t left = 0;
  for (size_t k = 0; k < n; ++k) {
    spec::PipelinePlan& pipe = out.pipelines[k];
    const int64_t p = pipe.num_stages();
    per[k] = pipeline_time_s[k] / perf::EqualStagePhaseSlots(p, pipe.micro_batches, 1);
    spec::PipelinePlan probe = pipe;
    probe.micro_batches = p;  // always accepted: is the rest of the pipeline interleavable?
    can[k] = CanInterleave(probe, chunks);
    if (!can[k] || spec::InterleavedMicroBatchesOk(static_cast<int>(p), pipe.micro_batches)) {
      continue;
    }
    const int64_t kept = pipe.micro_batches / p * p;  // >= 2p here
    left += pipe.micro_batches - kept;
    pipe.micro_batches = kept;
  }
  // The estimated phase of pipeline k at m micro-batches, interleaved where m allows it.
  auto estimate = [&](size_t k, int64_t m) {
    const int p = out.pipelines[k].num_stages();
    const bool interleaved = can[k] && spec::InterleavedMicroBatchesOk(p, m);
    return per[k] * perf::EqualStagePhaseSlots(p, m, interleaved ? chunks : 1);
  };
  // The smallest step that keeps pipeline k's count accepted (1 with one chunk or below 2p).
  auto step = [&](size_t k) -> int64_t {
    const spec::PipelinePlan& pipe = out.pipelines[k];
    const int64_t p = pipe.num_stages();
    if (!can[k] || pipe.micro_batches + 1 < 2 * p) return 1;
    return p - pipe.micro_batches % p;
  };
  while (left > 0) {
    size_t best = n;
    double best_t = 0;
    for (size_t k = 0; k < n; ++k) {
      const int64_t s = step(k);
      if (s > left) continue;
      const double t = estimate(k, out.pipelines[k].micro_batches + s);
      if (best == n || t < best_t) {
        best = k;
        best_t = t;
      }
    }
    if (best == n) {
      // No accepted step fits what is left: the pipeline it costs least takes it all and keeps
      // one chunk.
      for (size_t k = 0; k < n; ++k) {
        const double t =
            per[k] * perf::EqualStagePhaseSlots(out.pipelines[k].num_stages(),
                                                out.pipelines[k].micro_batches + left, 1);
        if (best == n || t < best_t) {
          best = k;
          best_t = t;
        }
      }
      out.pipelines[best].micro_batches += left;
      break;
    }
    const int64_t s = step(best);
    out.pipelines[best].micro_batches += s;
    left -= s;
  }
  return out;
}

int InterleaveIfFaster(const perf::Predictor& predictor, const std::vector<int>& chunks,
                       const perf::StragglerRates& rates, const perf::LinkRates& links,
                       spec::Plan* plan, perf::Prediction* prediction) {
  spec::Plan best_plan;
  perf::Prediction best_prediction;
  int best_v = 1;
  double best_s = prediction->iteration_s;
  auto consider = [&](const spec::Plan& from, int v) {
    spec::Plan cand;
    if (!InterleavedWhereAllowed(from, v, &cand)) return;
    perf::Prediction pred = predictor.PredictIfFits(cand, rates, links);
    if (!pred.fits_memory || !(pred.iteration_s < best_s * (1 - 1e-12))) return;
    best_s = pred.iteration_s;
    best_v = v;
    best_plan = std::move(cand);
    best_prediction = std::move(pred);
  };
  const bool timed = prediction->pipeline_time_s.size() == plan->pipelines.size();
  for (int v : chunks) {
    consider(*plan, v);
    if (!timed) continue;
    const spec::Plan moved = MicroBatchesForInterleaving(*plan, prediction->pipeline_time_s, v);
    bool differs = false;
    for (size_t k = 0; k < moved.pipelines.size(); ++k) {
      differs = differs || moved.pipelines[k].micro_batches != plan->pipelines[k].micro_batches;
    }
    if (differs) consider(moved, v);
  }
  if (best_v == 1) return 1;
  *plan = std::move(best_plan);
  *prediction = std::move(best_prediction);
  return best_v;
}

std::string InterleaveNote(const spec::Plan& plan) {
  bool any = false;
  bool same = true;
  std::string all;
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    any = any || pipe.chunks > 1;
    same = same && pipe.chunks == plan.pipelines.front().chunks;
    all += fmt::format("{}{}", all.empty() ? "" : "/", pipe.chunks);
  }
  if (!any) return "";
  return fmt::format(", interleaved v={}",
                     same ? std::to_string(plan.pipelines.front().chunks) : all);
}

}  // namespace motley::plan
