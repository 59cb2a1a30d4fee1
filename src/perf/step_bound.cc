// Predictor::StepLowerBound: a proven lower bound on Predict's step, for the planner to skip
// predicting plans that cannot win (plan/evaluate.h). It walks the same step program as Predict
// (perf/predict_step.cc), once, forwards, timing each piece by what no sharing of the network
// can beat:
//  - the pipeline phase: PipelineStageEndLowerBounds per pipeline, at the stages' costs without
//    recompute (the lightest), each boundary transfer at its floor (BoundaryTimes::fwd_floor_s),
//    every stage ready no earlier than its ranks' local ops before the pipeline (zero-grads);
//  - then each rank's ops in program order from its stage's end bound: local ops (grad-norm,
//    optimizer) at exactly Predict's times (LocalOpTime), and collectives in entry order:
//      a best-algorithm all-reduce's members all leave at the last entry + the fastest
//      candidate algorithm with every flow alone at its cap (a phase lasts as long as its
//      slowest flow, and sharing only lowers a flow's rate);
//      in a ring, member q + steps (mod n) leaves no earlier than member q entered + the
//      `steps` hops from q, each moving the ring's smallest chunk alone: a member forwards in
//      step s + 1 what it received in step s, over its own hop.
//  The step ends no earlier than any rank's end.
// Left out, so the bound stays below Predict: host staging copies, waits on busy links,
// contention between collectives (Predict's fair shares and background flows) and the pipeline
// transfers of the steady state. Those are what separate it from Predict.
#include <algorithm>
#include <map>
#include <utility>

#include "core/check.h"
#include "perf/comm_model.h"
#include "perf/predictor.h"
#include "perf/step_model.h"
#include "sched/step_program.h"

namespace motley::perf {
namespace {

// A ring's hop times (hop q: member q to q + 1, the closing hop included), for sums of
// consecutive hops in O(1).
class RingHops {
 public:
  explicit RingHops(const std::vector<Seconds>& hops) : prefix_(2 * hops.size() + 1, 0.0) {
    for (size_t i = 0; i < 2 * hops.size(); ++i) {
      prefix_[i + 1] = prefix_[i] + hops[i % hops.size()];
    }
  }
  size_t size() const { return prefix_.size() / 2; }
  // `steps` consecutive hops from hop `from` (wrapping).
  Seconds Chain(size_t from, size_t steps) const {
    const size_t n = size();
    if (n == 0) return 0.0;
    return static_cast<double>(steps / n) * prefix_[n] + prefix_[from + steps % n] - prefix_[from];
  }

 private:
  std::vector<Seconds> prefix_;
};

}  // namespace

Seconds Predictor::StepLowerBound(const spec::Plan& plan, const StragglerRates& rates,
                                  const LinkRates& link_rates, const BoundaryTimes* boundary,
                                  const sched::StepProgram* given_program) const {
  const sched::StepProgram built =
      given_program != nullptr ? sched::StepProgram{} : StepProgramFor(plan);
  const sched::StepProgram& program = given_program != nullptr ? *given_program : built;
  const size_t n = program.ranks.size();
  // Per rank: device type and straggler rate (as Predict's), and its local ops before the
  // pipeline op.
  const std::vector<RankTiming> timing = RankTimings(plan, program, rates);
  auto local_op = [&](size_t r, const sched::StepOp& op) {
    return LocalOpTime(timing[r].type, timing[r].rate, op);
  };
  std::vector<size_t> cursor(n, 0);  // each rank's next op
  std::vector<Seconds> before(n, 0.0);
  for (size_t r = 0; r < n; ++r) {
    const sched::RankStep& rs = program.ranks[r];
    if (rs.idle()) continue;
    for (; rs.ops[cursor[r]].kind != sched::StepOpKind::kPipeline; ++cursor[r]) {
      before[r] += local_op(r, rs.ops[cursor[r]]);
    }
    ++cursor[r];
  }

  // The pipelines: when each stage's last backward ends at the earliest.
  const BoundaryTimes solved =
      boundary != nullptr ? BoundaryTimes{} : SolveBoundaryTimes(plan, link_rates);
  const BoundaryTimes& links = boundary != nullptr ? *boundary : solved;
  std::vector<std::vector<Seconds>> ready(plan.pipelines.size());
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    ready[k].assign(static_cast<size_t>(plan.pipelines[k].num_stages()), 0.0);
  }
  for (size_t r = 0; r < n; ++r) {
    const sched::RankStep& rs = program.ranks[r];
    if (rs.idle()) continue;
    Seconds& rd = ready[static_cast<size_t>(rs.pipeline)][static_cast<size_t>(rs.stage)];
    rd = std::max(rd, before[r]);
  }
  std::vector<std::vector<Seconds>> stage_end(plan.pipelines.size());
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    const size_t p = pipe.stages.size();
    std::vector<Seconds> f(p), b(p);
    for (size_t i = 0; i < p; ++i) {
      const StageCost cost = StageCostOf(pipe.stages[i], pipe.micro_batch_size,
                                         spec::Recompute::kNone, rates, link_rates);
      f[i] = cost.forward_s;
      b[i] = cost.backward_s;
    }
    if (pipe.chunks == 1) {
      stage_end[k] = PipelineStageEndLowerBounds(f, b, pipe.micro_batches, links.fwd_floor_s[k],
                                                 links.bwd_floor_s[k], ready[k]);
    } else {
      // Interleaved: each device group runs its chunks' actions one at a time.
      stage_end[k] = ready[k];
      for (size_t i = 0; i < p; ++i) {
        stage_end[k][i % static_cast<size_t>(pipe.num_stages())] +=
            static_cast<double>(pipe.micro_batches) * (f[i] + b[i]);
      }
    }
  }

  // Each rank's earliest time at its cursor, from its stage's end.
  std::vector<Seconds> at(n, 0.0);
  for (size_t r = 0; r < n; ++r) {
    const sched::RankStep& rs = program.ranks[r];
    if (!rs.idle())
      at[r] = stage_end[static_cast<size_t>(rs.pipeline)][static_cast<size_t>(rs.stage)];
  }
  // Runs rank r's local ops up to its op of `collective`, then past it.
  auto advance = [&](size_t r, int collective) {
    const std::vector<sched::StepOp>& ops = program.ranks[r].ops;
    for (; cursor[r] < ops.size() && ops[cursor[r]].collective != collective; ++cursor[r]) {
      at[r] += local_op(r, ops[cursor[r]]);
    }
    MOTLEY_CHECK(cursor[r] < ops.size(), "step bound: a member without its collective");
    ++cursor[r];
  };
  std::map<std::pair<std::vector<int>, Bytes>, Seconds> best_floor;  // by devices and bytes
  std::vector<Seconds> entry;
  std::vector<Seconds> hop;
  for (size_t c = 0; c < program.collectives.size(); ++c) {
    const sched::Collective& col = program.collectives[c];
    if (sched::IsBetweenSteps(col.kind)) continue;  // the step's walk ends before them
    const size_t size = col.members.size();
    entry.resize(size);
    Seconds last = 0;
    for (size_t q = 0; q < size; ++q) {
      const auto r = static_cast<size_t>(col.members[q]);
      advance(r, static_cast<int>(c));
      entry[q] = at[r];
      last = std::max(last, at[r]);
    }
    if (size < 2) continue;
    const std::vector<int> devices = sched::CollectiveDevices(program, col);
    const double element_bytes = ElementBytesOf(col);
    if (UsesBestAllReduce(col.kind)) {
      const Bytes bytes = static_cast<double>(col.elements) * element_bytes;
      auto [it, fresh] = best_floor.emplace(std::make_pair(devices, bytes), 0.0);
      if (fresh) {
        it->second = GroupAllReduceTime(cluster_, devices, bytes,
                                        [&](int a, int b) { return PathOf(a, b, link_rates); });
      }
      for (int member : col.members) at[static_cast<size_t>(member)] = last + it->second;
      continue;
    }
    // A ring: every hop moving the smallest chunk a member sends in a step, alone.
    const RingSteps ring = RingStepsOf(col, element_bytes);
    const Bytes smallest = ring.smallest_chunk;
    hop.resize(size);
    for (size_t q = 0; q < size; ++q) {
      const FlowPath path = PathOf(devices[q], devices[(q + 1) % size], link_rates);
      hop[q] = path.latency_s + smallest / path.cap;
    }
    const RingHops hops(hop);
    const auto steps = static_cast<size_t>(ring.steps);
    for (size_t q = 0; q < size; ++q) {
      Seconds& t = at[static_cast<size_t>(col.members[(q + steps) % size])];
      t = std::max(t, entry[q] + hops.Chain(q, steps));
    }
  }
  // To each rank's end: its local ops up to the between-steps collectives.
  Seconds bound = 0;
  for (size_t r = 0; r < n; ++r) {
    const std::vector<sched::StepOp>& ops = program.ranks[r].ops;
    if (program.ranks[r].idle()) continue;
    for (; cursor[r] < ops.size() && !sched::IsCollective(ops[cursor[r]].kind); ++cursor[r]) {
      at[r] += local_op(r, ops[cursor[r]]);
    }
    bound = std::max(bound, at[r]);
  }
  return bound;
}

}  // namespace motley::perf
