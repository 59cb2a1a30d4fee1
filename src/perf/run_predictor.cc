// See run_predictor.h.
#include "perf/run_predictor.h"

#include <utility>

#include "perf/profile.h"

namespace motley::perf {

Status BuildRunPredictor(spec::RunFile run, const std::string& profile_path, RunPredictor* out) {
  out->run = std::move(run);
  const spec::RunFile& r = out->run;
  out->settings = DefaultSettings(r.cluster, r.train);
  out->roofline = std::make_unique<RooflineComputeModel>(r.cluster, r.model, out->settings);
  const ComputeModel* compute = out->roofline.get();
  bool all_emulated = !r.cluster.device_types.empty();
  for (const spec::DeviceType& t : r.cluster.device_types) all_emulated &= t.is_emulated();
  if (all_emulated) {  // the runtime charges emulated ops from spec/op_costs.h: count them so
    out->emulated = std::make_unique<EmulatedComputeModel>(r.cluster, r.model);
    compute = out->emulated.get();
  }
  if (!profile_path.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(Profile profile, LoadProfile(profile_path));
    MOTLEY_RETURN_IF_ERROR(CheckProfileMatchesModel(profile, r.model));
    out->profiled =
        std::make_unique<ProfiledComputeModel>(std::move(profile), r.cluster, *out->roofline);
    compute = out->profiled.get();
  }
  out->predictor =
      std::make_unique<Predictor>(r.cluster, r.model, r.train, *compute, out->settings);
  return Status::Ok();
}

Result<std::unique_ptr<RunPredictor>> MakeRunPredictor(spec::RunFile run,
                                                       const std::string& profile_path) {
  auto out = std::make_unique<RunPredictor>();
  MOTLEY_RETURN_IF_ERROR(BuildRunPredictor(std::move(run), profile_path, out.get()));
  return out;
}

}  // namespace motley::perf
