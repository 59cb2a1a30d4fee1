// Discrete-event simulator (docs/architecture.md §8): replays the pipeline phase of a plan's step
// event by event, on the same sched::Schedule action lists the runtime executes: compute actions
// take the predictor's stage costs (times each TP group's straggler rate); sends are eager, each
// transfer a flow queued behind the previous one over the same boundary and direction and, when the
// predictor's settings model NIC contention, sharing node NIC bandwidth with concurrent flows
// (sim/network.h); a batch of transfers waits for its receives. The rest of the step (zeroing,
// per-layer data-parallel all-reduces, the loss/norm all-reduce, the optimizer step, the skew
// between ranks) is the predictor's step model (Predictor::PredictWith), so simulator and
// predictor differ only where the event replay differs from the predictor's pipeline walk:
// bandwidth sharing. Outputs the iteration time, busy and idle time per device and, on request,
// a Chrome trace (Perfetto) of the step.
//
// Granularity: with `dedupe_identical_pipelines`, pipelines of identical shape (device types, TP
// degrees, blocks, micro-batches, boundary links, straggler rates) are simulated once and the
// result is copied; link sharing between such replicas is then not modelled.
//
// Ownership: Simulator keeps a reference to the predictor (and through it the cluster and model).
// Thread safety: Run() is const and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "perf/predictor.h"
#include "sim/network.h"
#include "spec/plan.h"

namespace motley::sim {

struct TraceEvent {
  std::string name;  // "F3", "B0", "SF2", "DP", "OPT"
  std::string category;  // "compute" | "p2p" | "dp" | "optimizer"
  int pipeline = 0;
  int stage = 0;
  Seconds start_s = 0;
  Seconds duration_s = 0;
};

struct SimOptions {
  bool record_trace = false;
  bool dedupe_identical_pipelines = false;
  perf::StragglerRates rates;  // per device; empty = all healthy
};

struct SimResult {
  Seconds iteration_s = 0;
  std::vector<Seconds> pipeline_backward_end_s;  // per pipeline: its stage 0's last backward
  std::vector<Seconds> device_busy_s;            // per global device id (compute + optimizer)
  std::vector<Seconds> device_idle_s;            // iteration_s - busy for used devices, 0 unused
  int64_t events = 0;                            // events processed
  int pipelines_simulated = 0;                   // after de-duplication
  std::vector<TraceEvent> trace;
};

class Simulator {
 public:
  explicit Simulator(const perf::Predictor& predictor);
  // The plan must pass spec::ValidatePlan. Errors only for a schedule that cannot be built.
  Result<SimResult> Run(const spec::Plan& plan, const SimOptions& options = {}) const;

 private:
  const perf::Predictor& predictor_;
};

// Chrome trace JSON ("traceEvents", microseconds; pid = pipeline, tid = stage), loadable in
// Perfetto or chrome://tracing.
std::string ChromeTraceJson(const spec::Plan& plan, const SimResult& result);

}  // namespace motley::sim
