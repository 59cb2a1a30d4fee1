// Fuzz target: plan files (docs/formats/plan.md) against the run examples/runs/local-hetero.yaml
// (6 emulated devices, the small model, global batch 16), as `motley predict` reads them: parse,
// ValidatePlan, then, for a valid plan, every pipeline's schedule (sched) and the predictor.
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "fuzz/fuzz_util.h"
#include "perf/emulated_compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "sched/schedule.h"
#include "spec/plan.h"
#include "spec/run_file.h"

namespace {

struct Fixture {
  motley::spec::RunFile run;
  motley::perf::PerfSettings settings;
  std::unique_ptr<motley::perf::EmulatedComputeModel> compute;
  std::unique_ptr<motley::perf::Predictor> predictor;
};

const Fixture& GetFixture() {
  static const Fixture* fixture = [] {
    auto* f = new Fixture;
    auto run =
        motley::spec::LoadRunFile(motley::fuzz::SourcePath("examples/runs/local-hetero.yaml"));
    if (!run.ok()) std::abort();
    f->run = std::move(run).value();
    f->settings = motley::perf::DefaultSettings(f->run.cluster);
    f->compute = std::make_unique<motley::perf::EmulatedComputeModel>(f->run.cluster, f->run.model);
    f->predictor = std::make_unique<motley::perf::Predictor>(
        f->run.cluster, f->run.model, f->run.train, *f->compute, f->settings);
    return f;
  }();
  return *fixture;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace motley;
  const Fixture& f = GetFixture();
  Result<spec::Plan> plan = spec::ParsePlan(fuzz::AsText(data, size), "fuzz-plan.json");
  if (!plan.ok()) return 0;
  (void)spec::PlanToJson(*plan);
  if (!spec::ValidatePlan(*plan, f.run.cluster, f.run.model, f.run.train).ok()) return 0;
  for (const spec::PipelinePlan& p : plan->pipelines) {
    auto schedule = sched::BuildSchedule(plan->schedule, p.num_stages(), p.micro_batches, {});
    if (schedule.ok()) (void)sched::CheckSchedule(*schedule);
  }
  (void)f.predictor->Predict(*plan);
  return 0;
}
