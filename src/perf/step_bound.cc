// Predictor::StepLowerBound: a proven lower bound on Predict's step, for the planner to skip
// predicting plans that cannot win (plan/evaluate.h). It walks the same step program as Predict
// (perf/predict_step.cc), timing each piece by what no sharing of the network can beat:
//  - the pipeline phase: PipelineStageEndLowerBounds per pipeline, at the stages' costs without
//    recompute (the lightest), each boundary transfer at its floor (BoundaryTimes::fwd_floor_s),
//    every stage ready no earlier than its local ops before the pipeline (zero-grads);
//  - then, forwards, each rank's ops in program order from its stage's end: local ops
//    (grad-norm, optimizer) at exactly Predict's times (LocalOpTime); a best-algorithm
//    all-reduce's members all leave at the last entry + F_c, the fastest candidate algorithm with
//    every flow alone at its cap (a phase lasts as long as its slowest flow; sharing only lowers
//    rates); in a ring, member q + j leaves no earlier than member q entered + the j hops from
//    q, each moving the ring's smallest chunk alone (a member forwards what it received, one
//    hop per step), up to j = steps (>= n - 1). The step ends no earlier than any rank's end.
//  - a set of rings entered together (one layer's groups) shares each network resource R its
//    hops cross: their rates there sum to at most R's capacity in every max-min solve, so some
//    hop h at R needs at least all their bytes V_R over the capacity for its own bytes. Member
//    h + 1 leaves no earlier than h's entry + steps x h's latency + V_R / capacity (a member's
//    sends run one after another on its hop). Which hop is unknown, so the step ends no earlier
//    than the least over the hops at R of that + member h + 1's `rest`: a bound on the time from
//    leaving a collective to the step's end, computed backwards over the collectives (local ops
//    exactly; a collective c's member, by some member leaving F_c' after it entered, F_c' the
//    least chain of `steps` hops for a ring, then that member's rest, the least over members).
// Host staging copies and waits only add, and are left out. Sets of best-algorithm all-reduces
// get no resource term: which algorithm's flows share a resource is Predict's choice (and the
// planner's unpolished plans use ZeRO-1's rings). Contention between different sets (Predict's
// background flows) and the steady state's transfers are not bounded: what it leaves out is
// what separates it from Predict.
#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "core/check.h"
#include "perf/comm_model.h"
#include "perf/predictor.h"
#include "perf/step_model.h"
#include "sched/step_program.h"

namespace motley::perf {
namespace {

// A ring's hops (member q to q + 1, the closing hop included) at their floors, for sums of
// consecutive hops in O(1).
class RingHops {
 public:
  explicit RingHops(const std::vector<Seconds>& hops) : prefix_(2 * hops.size() + 1, 0.0) {
    for (size_t i = 0; i < 2 * hops.size(); ++i)
      prefix_[i + 1] = prefix_[i] + hops[i % hops.size()];
  }
  size_t size() const { return prefix_.size() / 2; }
  // `steps` consecutive hops from hop `from` (wrapping).
  Seconds Chain(size_t from, size_t steps) const {
    const size_t n = size();
    if (n == 0) return 0.0;
    const Seconds round = prefix_[n];
    return static_cast<double>(steps / n) * round + prefix_[from + steps % n] - prefix_[from];
  }

 private:
  std::vector<Seconds> prefix_;
};

}  // namespace

Seconds Predictor::StepLowerBound(const spec::Plan& plan, const StragglerRates& rates,
                                  const LinkRates& link_rates) const {
  sched::StepProgramOptions program_options;
  program_options.with_actions = false;
  Result<sched::StepProgram> built =
      sched::BuildStepProgram(plan, model_, train_.seq_len, program_options);
  MOTLEY_CHECK(built.ok(), built.status().message());
  const sched::StepProgram& program = *built;
  const size_t n = program.ranks.size();
  std::vector<int> type(n);
  std::vector<double> rate(n);
  for (size_t r = 0; r < n; ++r) {
    const sched::RankStep& rs = program.ranks[r];
    type[r] = cluster_.device(rs.device).type;
    rate[r] = rs.idle() ? 1.0
                        : GroupRate(rates, plan.pipelines[static_cast<size_t>(rs.pipeline)]
                                               .stages[static_cast<size_t>(rs.stage)]
                                               .devices);
  }

  // The smallest chunk a ring's member sends in one step, in bytes (RingStepsOf's chunks).
  auto smallest_chunk = [&](const sched::Collective& col) -> Bytes {
    const double eb = ElementBytesOf(col);
    if (col.chunks.empty()) {  // all-reduce: AllReduceChunks' smaller chunk
      return static_cast<double>(col.elements / static_cast<int64_t>(col.members.size())) * eb;
    }
    return static_cast<double>(*std::min_element(col.chunks.begin(), col.chunks.end())) * eb;
  };
  // Each hop of a ring (member q to q + 1, the closing hop included) moving the smallest chunk
  // alone: the least time of any of its steps.
  auto ring_hops = [&](const sched::Collective& col) {
    const std::vector<int> devices = sched::CollectiveDevices(program, col);
    const Bytes smallest = smallest_chunk(col);
    std::vector<Seconds> hops(devices.size());
    for (size_t q = 0; q < devices.size(); ++q) {
      const FlowPath path = PathOf(devices[q], devices[(q + 1) % devices.size()], link_rates);
      hops[q] = path.latency_s + smallest / path.cap;
    }
    return hops;
  };
  // F_c' per collective (0 for the between-steps ones, which end the step's walk): best-algorithm
  // all-reduces, F_c; rings, the least chain of `steps` hops (from the last member to enter).
  std::map<std::pair<std::vector<int>, Bytes>, Seconds> best_floor_cache;
  auto floor_of = [&](const sched::Collective& col) -> Seconds {
    if (sched::IsBetweenSteps(col.kind) || col.members.size() < 2) return 0.0;
    const std::vector<int> devices = sched::CollectiveDevices(program, col);
    const double eb = ElementBytesOf(col);
    if (UsesBestAllReduce(col.kind)) {
      const Bytes bytes = static_cast<double>(col.elements) * eb;
      auto [it, fresh] = best_floor_cache.emplace(std::make_pair(devices, bytes), 0.0);
      if (!fresh) return it->second;
      Seconds best = std::numeric_limits<Seconds>::infinity();
      for (const CollectiveFlows& c : AllReduceCandidates(cluster_, devices, bytes)) {
        Seconds t = 0;
        for (const FlowPhase& phase : c.phases) {
          Seconds slowest = 0;
          for (const PhaseFlow& f : phase.flows) {
            const FlowPath path = PathOf(f.from, f.to, link_rates);
            slowest = std::max(slowest, f.latencies * path.latency_s + f.bytes / path.cap);
          }
          t += slowest;
        }
        best = std::min(best, t);
      }
      it->second = best < std::numeric_limits<Seconds>::infinity() ? best : 0.0;
      return it->second;
    }
    const RingHops hops(ring_hops(col));
    const auto steps = static_cast<size_t>(RingStepsOf(col, eb).steps);
    Seconds least = std::numeric_limits<Seconds>::infinity();
    for (size_t q = 0; q < hops.size(); ++q) least = std::min(least, hops.Chain(q, steps));
    return least;
  };

  // Each rank's local ops before its pipeline op, which delay its stage's ready time.
  std::vector<size_t> pipeline_op(n, 0);
  std::vector<Seconds> before(n, 0.0);
  for (size_t r = 0; r < n; ++r) {
    const std::vector<sched::StepOp>& ops = program.ranks[r].ops;
    size_t i = 0;
    for (; i < ops.size() && ops[i].kind != sched::StepOpKind::kPipeline; ++i) {
      before[r] += LocalOpTime(type[r], rate[r], ops[i]);
    }
    pipeline_op[r] = i;
  }

  // Backwards over the collectives: rest_at[r] bounds the time from rank r's position cursor[r]
  // in its op list to the step's end; settle(r, c) moves the cursor down to just after rank r's
  // op of collective c (-1: to just after its pipeline op), adding the local ops passed.
  // rest_after[c][q]: member q's rest from leaving collective c.
  std::vector<size_t> cursor(n);
  std::vector<Seconds> rest_at(n, 0.0);
  for (size_t r = 0; r < n; ++r) cursor[r] = program.ranks[r].ops.size();
  auto settle = [&](size_t r, int collective) {
    const std::vector<sched::StepOp>& ops = program.ranks[r].ops;
    while (cursor[r] > pipeline_op[r] + 1) {
      const sched::StepOp& op = ops[cursor[r] - 1];
      if (collective >= 0 && op.collective == collective) break;
      if (sched::IsCollective(op.kind)) {
        // Only a between-steps collective is met here (the others are settled in entry
        // order); the step's walk stops at it.
        MOTLEY_CHECK(sched::IsBetweenSteps(op.kind), "step bound: collectives out of order");
        rest_at[r] = 0.0;
      } else {
        rest_at[r] += LocalOpTime(type[r], rate[r], op);
      }
      --cursor[r];
    }
  };
  const size_t nc = program.collectives.size();
  std::vector<std::vector<Seconds>> rest_after(nc);
  for (size_t c = nc; c-- > 0;) {
    const sched::Collective& col = program.collectives[c];
    if (sched::IsBetweenSteps(col.kind)) continue;
    Seconds least = std::numeric_limits<Seconds>::infinity();
    rest_after[c].resize(col.members.size());
    for (size_t q = 0; q < col.members.size(); ++q) {
      const auto r = static_cast<size_t>(col.members[q]);
      settle(r, static_cast<int>(c));
      MOTLEY_CHECK(cursor[r] > pipeline_op[r] + 1 &&
                       program.ranks[r].ops[cursor[r] - 1].collective == static_cast<int>(c),
                   "step bound: a member without its collective");
      rest_after[c][q] = rest_at[r];
      least = std::min(least, rest_at[r]);
    }
    const Seconds through = floor_of(col) + (col.members.empty() ? 0.0 : least);
    for (int member : col.members) {
      const auto r = static_cast<size_t>(member);
      --cursor[r];
      rest_at[r] = through;
    }
  }
  for (size_t r = 0; r < n; ++r) settle(r, -1);

  // The pipelines: when each stage's last backward ends at the earliest.
  const BoundaryTimes links = SolveBoundaryTimes(plan, link_rates);
  std::vector<std::vector<Seconds>> stage_end(plan.pipelines.size());
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    const size_t p = pipe.stages.size();
    std::vector<Seconds> ready(static_cast<size_t>(pipe.num_stages()), 0.0);
    for (size_t r = 0; r < n; ++r) {
      const sched::RankStep& rs = program.ranks[r];
      if (rs.pipeline == static_cast<int>(k)) {
        Seconds& rd = ready[static_cast<size_t>(rs.stage)];
        rd = std::max(rd, before[r]);
      }
    }
    std::vector<Seconds> f(p), b(p);
    for (size_t i = 0; i < p; ++i) {
      const StageCost cost = StageCostOf(pipe.stages[i], pipe.micro_batch_size,
                                         spec::Recompute::kNone, rates, link_rates);
      f[i] = cost.forward_s;
      b[i] = cost.backward_s;
    }
    if (pipe.chunks == 1) {
      stage_end[k] = PipelineStageEndLowerBounds(f, b, pipe.micro_batches, links.fwd_floor_s[k],
                                                 links.bwd_floor_s[k], ready);
    } else {
      // Interleaved: each device group runs its chunks' actions one at a time.
      stage_end[k] = ready;
      for (size_t i = 0; i < p; ++i) {
        stage_end[k][i % static_cast<size_t>(pipe.num_stages())] +=
            static_cast<double>(pipe.micro_batches) * (f[i] + b[i]);
      }
    }
  }
  Seconds bound = 0;
  std::vector<Seconds> at(n, 0.0);  // forwards: each rank's earliest time at its cursor
  for (size_t r = 0; r < n; ++r) {
    const sched::RankStep& rs = program.ranks[r];
    if (rs.idle()) continue;
    at[r] = stage_end[static_cast<size_t>(rs.pipeline)][static_cast<size_t>(rs.stage)];
    bound = std::max(bound, at[r] + rest_at[r]);
    cursor[r] = pipeline_op[r] + 1;
  }

  // Forwards over the collectives: each member's earliest entry and exit (see the top).
  std::vector<std::vector<Seconds>> entry(nc);
  auto advance = [&](size_t r, int collective) {
    const std::vector<sched::StepOp>& ops = program.ranks[r].ops;
    while (cursor[r] < ops.size() && ops[cursor[r]].collective != collective) {
      at[r] += LocalOpTime(type[r], rate[r], ops[cursor[r]]);
      ++cursor[r];
    }
    MOTLEY_CHECK(cursor[r] < ops.size(), "step bound: a member without its collective");
    ++cursor[r];
  };
  for (size_t c = 0; c < nc; ++c) {
    const sched::Collective& col = program.collectives[c];
    if (sched::IsBetweenSteps(col.kind)) continue;
    entry[c].resize(col.members.size());
    Seconds last = 0;
    for (size_t q = 0; q < col.members.size(); ++q) {
      const auto r = static_cast<size_t>(col.members[q]);
      advance(r, static_cast<int>(c));
      entry[c][q] = at[r];
      last = std::max(last, at[r]);
    }
    if (UsesBestAllReduce(col.kind)) {
      const Seconds exit = last + floor_of(col);
      for (int member : col.members) at[static_cast<size_t>(member)] = exit;
    } else if (col.members.size() >= 2) {
      // Member q + j leaves no earlier than member q entered + the j hops from q at their
      // floors (one per step, j <= steps); j = steps is the longest chain.
      const RingHops hops(ring_hops(col));
      const auto steps = static_cast<size_t>(RingStepsOf(col, ElementBytesOf(col)).steps);
      const size_t size = col.members.size();
      std::vector<Seconds> exit(size);
      for (size_t q = 0; q < size; ++q) exit[q] = entry[c][q];
      for (size_t q = 0; q < size; ++q) {
        Seconds& e = exit[(q + steps) % size];
        e = std::max(e, entry[c][q] + hops.Chain(q, steps));
      }
      for (size_t q = 0; q < size; ++q) {
        Seconds& t = at[static_cast<size_t>(col.members[q])];
        t = std::max(t, exit[q]);
      }
    }
  }
  // To each rank's end: its local ops up to the between-steps collectives.
  for (size_t r = 0; r < n; ++r) {
    const std::vector<sched::StepOp>& ops = program.ranks[r].ops;
    if (program.ranks[r].idle()) continue;
    for (; cursor[r] < ops.size() && !sched::IsCollective(ops[cursor[r]].kind); ++cursor[r]) {
      at[r] += LocalOpTime(type[r], rate[r], ops[cursor[r]]);
    }
    bound = std::max(bound, at[r]);
  }
  if (network_.shared()) {
    for (const auto& [first, end] : sched::ConcurrentCollectiveSets(program)) {
      const sched::Collective& head = program.collectives[first];
      if (sched::IsBetweenSteps(head.kind) || UsesBestAllReduce(head.kind)) continue;
      // Per resource: the bytes the set's hops move through it, and its hops.
      struct HopAt {
        size_t collective = 0;
        size_t member = 0;
        Seconds latency_s = 0;  // steps x the hop's latency
      };
      std::map<int, std::pair<Bytes, std::vector<HopAt>>> at_resource;
      for (size_t c = first; c < end; ++c) {
        const sched::Collective& col = program.collectives[c];
        const size_t size = col.members.size();
        if (size < 2) continue;
        const RingSteps ring = RingStepsOf(col, ElementBytesOf(col));
        const Bytes moved = static_cast<double>(ring.steps) * smallest_chunk(col);
        for (size_t q = 0; q < size; ++q) {
          const FlowPath path = PathOf(
              program.ranks[static_cast<size_t>(col.members[q])].device,
              program.ranks[static_cast<size_t>(col.members[(q + 1) % size])].device, link_rates);
          for (int i = 0; i < path.num_resources; ++i) {
            auto& [bytes, hops] = at_resource[path.resources[static_cast<size_t>(i)]];
            bytes += moved;
            hops.push_back({c, q, static_cast<double>(ring.steps) * path.latency_s});
          }
        }
      }
      for (const auto& [resource, load] : at_resource) {
        const Seconds carry = load.first / network_.capacities()[static_cast<size_t>(resource)];
        Seconds least = std::numeric_limits<Seconds>::infinity();
        for (const HopAt& h : load.second) {
          const size_t next = (h.member + 1) % program.collectives[h.collective].members.size();
          least = std::min(least, entry[h.collective][h.member] + h.latency_s + carry +
                                      rest_after[h.collective][next]);
        }
        bound = std::max(bound, least);
      }
    }
  }
  return bound;
}

}  // namespace motley::perf
