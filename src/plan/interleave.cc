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
  int64_t first = 0;
  for (spec::StagePlan& st : out.stages) {
    st.first_block = first;
    first += st.num_blocks;
  }
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

int InterleaveIfFaster(const perf::Predictor& predictor, const std::vector<int>& chunks,
                       const perf::StragglerRates& rates, const perf::LinkRates& links,
                       spec::Plan* plan, perf::Prediction* prediction) {
  spec::Plan best_plan;
  perf::Prediction best_prediction;
  int best_v = 1;
  double best_s = prediction->iteration_s;
  for (int v : chunks) {
    spec::Plan cand;
    if (!InterleavedWhereAllowed(*plan, v, &cand)) continue;
    perf::Prediction pred = predictor.Predict(cand, rates, links);
    if (!pred.fits_memory || !(pred.iteration_s < best_s * (1 - 1e-12))) continue;
    best_s = pred.iteration_s;
    best_v = v;
    best_plan = std::move(cand);
    best_prediction = std::move(pred);
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
