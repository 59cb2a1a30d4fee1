// Fuzz target: run files (docs/formats/run-file.md) as `motley validate` reads them, relative
// paths resolved against examples/runs (so seeds naming ../clusters/*.yaml load those files),
// and on success the checks every command makes next: parameter counts, devices per type and
// the one-device uniform plan, validated against the run. Any abort, sanitizer report or leak
// is a finding.
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "spec/plan.h"
#include "spec/run_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace motley;
  static const std::string base = fuzz::SourcePath("examples/runs");
  Result<spec::RunFile> run = spec::ParseRunFile(fuzz::AsText(data, size), "fuzz.yaml", base);
  if (!run.ok()) return 0;
  (void)run->model.TotalParams();
  (void)run->cluster.DevicesPerType();
  spec::UniformPlanOptions options;
  Result<spec::Plan> plan = spec::UniformPlan(run->cluster, run->model, run->train, options);
  if (plan.ok()) (void)spec::ValidatePlan(*plan, run->cluster, run->model, run->train);
  return 0;
}
