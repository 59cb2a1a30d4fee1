// Discrete-event simulator (docs/architecture.md §8): replays one training step of a plan, the
// step program (sched/step_program.h) every rank runs, event by event, with every transfer a flow
// over the shared network (perf/network.h, sim/flow_engine.h):
//  - a rank runs its local ops (zero-grads, grad-norm, optimizer) at the predictor's op costs;
//  - a stage (its TP group in lockstep) walks its schedule's action list (the runtime's); a
//    forward or backward takes the predictor's stage cost (TP all-reduces inside it), a send is
//    eager: one flow per receiving TP rank from its boundary peer (spec::BoundaryPeer), queued on
//    that directed link; a batch of sends and receives waits for its receives;
//  - a collective starts as its members enter it (after packing a layer buffer on the host):
//    the runtime's ring engine step by step (each step's sends are flows queued on their links,
//    a member sends step s + 1 once step s has arrived), or, above exact_ring_max_ranks members
//    and for the best-algorithm all-reduces the predictor chose (Predictor::TimeAllReduceSet),
//    phase by phase: every flow of a phase at once (its ring steps' or tree levels' latencies
//    and bytes in one flow), the next phase when the slowest is done;
//  - between steps, the metrics all-gather and the plan agreement; the step is measured as the
//    predictor measures it: the second of two steps (skewed by the first's between-step
//    collectives), from the earliest rank's start to the latest rank's end (one step from a
//    common start above exact_ring_max_ranks ranks).
// With sharing off (emulated clusters) every flow runs at its own link's speed, so the replay
// reproduces the runtime's virtual clock (tests/plan_vs_runtime); with sharing on, flows of
// different collectives, pipelines and layers that overlap in time share NICs and fabrics, which
// the predictor's closed form counts only within a set of collectives entered together.
// Outputs the step time, busy and idle time per device and, on request, a Chrome trace.
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
#include "spec/plan.h"

namespace motley::sim {

struct TraceEvent {
  std::string name;      // "F3", "B0", "p2p", "all-reduce 3", "optimizer"
  std::string category;  // "compute" | "p2p" | "dp" | "optimizer" | "step"
  int pipeline = 0;
  int stage = 0;
  Seconds start_s = 0;
  Seconds duration_s = 0;
};

struct SimOptions {
  bool record_trace = false;
  perf::StragglerRates rates;  // per device; empty = all healthy
  perf::LinkRates links;       // per device pair; empty = all healthy
};

struct SimResult {
  Seconds iteration_s = 0;
  std::vector<Seconds> pipeline_backward_end_s;  // per pipeline: its stage 0's last backward
  std::vector<Seconds> device_busy_s;            // per global device id (compute + optimizer)
  std::vector<Seconds> device_idle_s;            // iteration_s - busy for used devices, 0 unused
  int64_t events = 0;                            // events processed (ranks, stages, flows)
  int64_t transfers = 0;                         // flows replayed
  std::vector<TraceEvent> trace;
};

class Simulator {
 public:
  explicit Simulator(const perf::Predictor& predictor);
  // The plan must pass spec::ValidatePlan. Errors for a schedule or step program that cannot be
  // built, and when the replay stops before every rank finished (a deadlock, naming the rank).
  Result<SimResult> Run(const spec::Plan& plan, const SimOptions& options = {}) const;

 private:
  const perf::Predictor& predictor_;
};

// Chrome trace JSON ("traceEvents", microseconds; pid = pipeline, tid = stage), loadable in
// Perfetto or chrome://tracing.
std::string ChromeTraceJson(const spec::Plan& plan, const SimResult& result);

}  // namespace motley::sim
