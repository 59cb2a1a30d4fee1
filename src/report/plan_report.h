// The plan part of motley's HTML reports: for one plan, a summary (predicted and simulated step,
// tokens/s, MFU, memory per device type, the devices it leaves out), the device map grouped by
// node type (one cell per device, coloured by pipeline or stage, readable at thousands of
// devices), per-device utilisation from a simulation, the stage layout, and the simulated pipeline
// timeline on a time axis; for `motley plan`, the baseline comparison chart. Pages:
// PlanReportHtml (`motley plan --report`) and SimulationReportHtml (`motley simulate --report`);
// `motley train --report` combines PlanSections with report/run_report.h. Chart ids and marks:
// docs/formats/report.md. Pure functions; thread-safe.
#pragma once

#include <string>

#include "perf/predictor.h"
#include "plan/planner.h"
#include "sim/simulator.h"
#include "spec/plan.h"

namespace motley::report {

struct PlanView {
  std::string title;                           // e.g. "chosen plan", a plan file's name
  const spec::Plan* plan = nullptr;            // required
  perf::Prediction prediction;                 // of *plan
  const sim::SimResult* simulation = nullptr;  // of *plan (with record_trace for the timeline)
  std::string id_prefix;  // prefixes chart ids when a page shows several plans ("" for one)
};

// <h2> sections for one plan on the predictor's cluster.
std::string PlanSections(const perf::Predictor& predictor, const PlanView& view);

// The baselines and references of a planner report: a bar chart of tokens/s (the chosen plan,
// each baseline found, the compute bound, the HETHUB sum, the exhaustive optimum) and a table of
// speed-ups.
std::string BaselineSections(const plan::PlanReport& report);

// `motley plan --report`: the chosen plan (simulated with a trace) and the baselines.
std::string PlanReportHtml(const perf::Predictor& predictor, const plan::PlanReport& report,
                           const sim::SimResult& simulation);

// `motley simulate --report`: one plan, its prediction and simulation.
std::string SimulationReportHtml(const perf::Predictor& predictor, const PlanView& view);

}  // namespace motley::report
