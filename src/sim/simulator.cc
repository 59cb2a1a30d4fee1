// See simulator.h. One actor per simulated stage walks its action list; events are ordered by
// (time, sequence number), so runs are deterministic.
#include "sim/simulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "sched/plan_schedules.h"
#include "sched/schedule.h"

namespace motley::sim {
namespace {

using sched::Action;
using sched::ActionKind;

struct Actor {
  int pipeline = 0;  // index into the plan
  int stage = 0;
  const std::vector<Action>* actions = nullptr;
  size_t pc = 0;
  int waiting = 0;  // receives of the current batch not yet arrived
  bool posted = false;
  perf::StageCost cost;
  Seconds busy_s = 0;
  Seconds end_s = 0;
  Seconds batch_start_s = 0;
};

struct Flow {
  int sender = 0;    // actor ids
  int receiver = 0;
  Bytes remaining = 0;
  BytesPerSecond cap = 0;
  BytesPerSecond rate = 0;
  Seconds latency_s = 0;
  Seconds last_update = 0;
  std::vector<int> resources;
  int version = 0;
  bool done = false;
  std::tuple<int, int, int, int64_t> key;  // (pipeline, boundary, direction, micro-batch)
};

enum class EventKind { kActorReady, kFlowStart, kFlowCheck };

struct Event {
  Seconds time = 0;
  int64_t seq = 0;
  EventKind kind = EventKind::kActorReady;
  int id = 0;
  int version = 0;
  bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

// The pipeline phase of a plan (see simulator.h): actors walk their action lists from their ready
// times; sends are eager (a flow per transfer, queued behind the previous transfer over the same
// boundary and direction, as the runtime's links queue), a batch waits for its receives.
class PhaseRun {
 public:
  // `schedules` are plan's (sched::PlanSchedules::Build(plan)).
  PhaseRun(const perf::Predictor& predictor, const spec::Plan& plan,
           const sched::PlanSchedules& schedules, const SimOptions& options,
           const std::vector<int>& rep_of, SimResult* result)
      : predictor_(predictor),
        plan_(plan),
        schedules_(schedules),
        options_(options),
        rep_of_(rep_of),
        network_(predictor.cluster()),
        result_(result) {}

  Result<std::vector<std::vector<Seconds>>> Run(const std::vector<std::vector<Seconds>>& ready);
  const std::vector<Actor>& actors() const { return actors_; }
  int ActorOf(int pipeline, int stage) const { return actor_of_.at({pipeline, stage}); }

 private:
  void Push(Seconds t, EventKind kind, int id, int version = 0) {
    events_.push(Event{t, seq_++, kind, id, version});
  }
  void Advance(int a, Seconds now);
  void Send(int a, const Action& action, Seconds now);
  void StartNextFlow(const std::tuple<int, int, int>& link, Seconds now);
  void Reshare(const std::vector<int>& seed_resources, Seconds now);
  void CompleteFlow(int f, Seconds now);
  void Trace(int a, std::string name, const char* cat, Seconds start, Seconds dur) {
    if (!options_.record_trace) return;
    result_->trace.push_back(TraceEvent{std::move(name), cat,
                                        actors_[static_cast<size_t>(a)].pipeline,
                                        actors_[static_cast<size_t>(a)].stage, start, dur});
  }
  const spec::StagePlan& StageOf(int a) const {
    const Actor& act = actors_[static_cast<size_t>(a)];
    return plan_.pipelines[static_cast<size_t>(act.pipeline)].stages[static_cast<size_t>(act.stage)];
  }

  const perf::Predictor& predictor_;
  const spec::Plan& plan_;
  const sched::PlanSchedules& schedules_;
  const SimOptions& options_;
  const std::vector<int>& rep_of_;
  NodeNicNetwork network_;
  std::vector<Actor> actors_;
  std::map<std::pair<int, int>, int> actor_of_;  // (pipeline, stage) -> actor
  std::vector<Flow> flows_;
  std::map<int, std::set<int>> resource_flows_;  // active shared flows per resource
  // Per (pipeline, boundary, direction): flows waiting for the link, and whether one is on it.
  std::map<std::tuple<int, int, int>, std::deque<int>> link_queue_;
  std::set<std::tuple<int, int, int>> link_busy_;
  std::set<std::tuple<int, int, int, int64_t>> arrived_;
  std::map<std::tuple<int, int, int, int64_t>, int> waiting_;  // receive -> actor
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t seq_ = 0;
  SimResult* result_;
};

// (pipeline, boundary, direction) of a communication action of actor `act`.
std::tuple<int, int, int> LinkOf(const Actor& act, const Action& action) {
  switch (action.kind) {
    case ActionKind::kSendForward: return {act.pipeline, act.stage, 0};
    case ActionKind::kRecvForward: return {act.pipeline, act.stage - 1, 0};
    case ActionKind::kSendBackward: return {act.pipeline, act.stage - 1, 1};
    case ActionKind::kRecvBackward: return {act.pipeline, act.stage, 1};
    default: MOTLEY_CHECK(false, "not a communication action");
  }
  return {};
}

void PhaseRun::Advance(int a, Seconds now) {
  Actor& act = actors_[static_cast<size_t>(a)];
  const std::vector<Action>& list = *act.actions;
  while (act.pc < list.size()) {
    const Action& action = list[act.pc];
    if (!sched::IsCommunication(action.kind)) {
      ++act.pc;
      const Seconds d = action.kind == ActionKind::kForward ? act.cost.forward_s : act.cost.backward_s;
      act.busy_s += d;
      if (action.kind == ActionKind::kBackward && act.stage == 0 &&
          action.micro_batch == plan_.pipelines[static_cast<size_t>(act.pipeline)].micro_batches - 1) {
        result_->pipeline_backward_end_s[static_cast<size_t>(act.pipeline)] = now + d;
      }
      Trace(a, sched::ActionToString(action), "compute", now, d);
      Push(now + d, EventKind::kActorReady, a);
      return;
    }
    size_t end = act.pc;
    while (end < list.size() && sched::IsCommunication(list[end].kind)) ++end;
    if (!act.posted) {
      act.posted = true;
      act.batch_start_s = now;
      for (size_t j = act.pc; j < end; ++j) {
        const Action& x = list[j];
        if (x.kind == ActionKind::kSendForward || x.kind == ActionKind::kSendBackward) {
          Send(a, x, now);
          continue;
        }
        const auto [k, boundary, dir] = LinkOf(act, x);
        const auto key = std::make_tuple(k, boundary, dir, x.micro_batch);
        if (arrived_.count(key) == 0) {
          waiting_[key] = a;
          ++act.waiting;
        }
      }
    }
    if (act.waiting > 0) return;  // resumed by the last arriving receive
    if (now > act.batch_start_s) Trace(a, "p2p", "p2p", act.batch_start_s, now - act.batch_start_s);
    act.posted = false;
    act.pc = end;
  }
  act.end_s = now;
}

void PhaseRun::Send(int a, const Action& action, Seconds now) {
  const Actor& act = actors_[static_cast<size_t>(a)];
  const auto link = LinkOf(act, action);
  const auto [k, boundary, dir] = link;
  const int other = ActorOf(k, dir == 0 ? act.stage + 1 : act.stage - 1);
  const spec::StagePlan& from = StageOf(a);
  const spec::StagePlan& to = StageOf(other);
  Flow flow;
  flow.sender = a;
  flow.receiver = other;
  flow.key = std::make_tuple(k, boundary, dir, action.micro_batch);
  flow.remaining = predictor_.ActivationMessageBytes(
      plan_.pipelines[static_cast<size_t>(k)].micro_batch_size);
  if (from.devices.front() == to.devices.front()) {
    flow.remaining = 0;
  } else {
    const PathInfo path = network_.Path(from.devices.front(), to.devices.front());
    flow.latency_s = path.latency_s;
    flow.cap = path.bandwidth;
    if (predictor_.settings().nic_contention) flow.resources = path.resources;
  }
  flow.last_update = now;
  const int fid = static_cast<int>(flows_.size());
  flows_.push_back(std::move(flow));
  link_queue_[link].push_back(fid);
  if (link_busy_.count(link) == 0) StartNextFlow(link, now);
}

void PhaseRun::StartNextFlow(const std::tuple<int, int, int>& link, Seconds now) {
  std::deque<int>& q = link_queue_[link];
  if (q.empty()) {
    link_busy_.erase(link);
    return;
  }
  const int fid = q.front();
  q.pop_front();
  link_busy_.insert(link);
  Push(now + flows_[static_cast<size_t>(fid)].latency_s, EventKind::kFlowStart, fid);
}

void PhaseRun::Reshare(const std::vector<int>& seed_resources, Seconds now) {
  // The connected component of flows reachable from the seed resources.
  std::set<int> resources(seed_resources.begin(), seed_resources.end());
  std::set<int> comp;
  std::vector<int> stack(seed_resources.begin(), seed_resources.end());
  while (!stack.empty()) {
    const int r = stack.back();
    stack.pop_back();
    for (int f : resource_flows_[r]) {
      if (!comp.insert(f).second) continue;
      for (int r2 : flows_[static_cast<size_t>(f)].resources) {
        if (resources.insert(r2).second) stack.push_back(r2);
      }
    }
  }
  if (comp.empty()) return;
  std::vector<int> ids(comp.begin(), comp.end());
  std::vector<std::vector<int>> paths;
  std::vector<BytesPerSecond> caps;
  for (int f : ids) {
    Flow& fl = flows_[static_cast<size_t>(f)];
    fl.remaining = std::max(0.0, fl.remaining - fl.rate * (now - fl.last_update));
    fl.last_update = now;
    paths.push_back(fl.resources);
    caps.push_back(fl.cap);
  }
  const std::vector<BytesPerSecond> rates = FairShare(paths, caps, network_.Capacities());
  for (size_t i = 0; i < ids.size(); ++i) {
    Flow& fl = flows_[static_cast<size_t>(ids[i])];
    fl.rate = rates[i];
    ++fl.version;
    Push(now + fl.remaining / fl.rate, EventKind::kFlowCheck, ids[i], fl.version);
  }
}

void PhaseRun::CompleteFlow(int f, Seconds now) {
  Flow& fl = flows_[static_cast<size_t>(f)];
  fl.done = true;
  for (int r : fl.resources) resource_flows_[r].erase(f);
  if (!fl.resources.empty()) Reshare(fl.resources, now);
  const auto key = fl.key;
  StartNextFlow({std::get<0>(key), std::get<1>(key), std::get<2>(key)}, now);
  arrived_.insert(key);
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  const int a = it->second;
  waiting_.erase(it);
  if (--actors_[static_cast<size_t>(a)].waiting == 0) Advance(a, now);
}

Result<std::vector<std::vector<Seconds>>> PhaseRun::Run(
    const std::vector<std::vector<Seconds>>& ready) {
  const size_t np = plan_.pipelines.size();
  const perf::StragglerRates& rates = options_.rates;
  for (size_t k = 0; k < np; ++k) {
    if (rep_of_[k] != static_cast<int>(k)) continue;
    const spec::PipelinePlan& pipe = plan_.pipelines[k];
    const sched::Schedule& schedule = schedules_.of(k);
    for (size_t i = 0; i < pipe.stages.size(); ++i) {
      Actor act;
      act.pipeline = static_cast<int>(k);
      act.stage = static_cast<int>(i);
      act.actions = &schedule.stages[i];
      act.cost = predictor_.StageCostOf(pipe.stages[i], pipe.micro_batch_size,
                                        pipe.stages[i].recompute, rates);
      actor_of_[{static_cast<int>(k), static_cast<int>(i)}] = static_cast<int>(actors_.size());
      actors_.push_back(act);
    }
  }
  for (size_t a = 0; a < actors_.size(); ++a) {
    const Actor& act = actors_[a];
    Push(ready[static_cast<size_t>(act.pipeline)][static_cast<size_t>(act.stage)],
         EventKind::kActorReady, static_cast<int>(a));
  }
  while (!events_.empty()) {
    const Event ev = events_.top();
    events_.pop();
    ++result_->events;
    switch (ev.kind) {
      case EventKind::kActorReady:
        Advance(ev.id, ev.time);
        break;
      case EventKind::kFlowStart: {
        Flow& fl = flows_[static_cast<size_t>(ev.id)];
        fl.last_update = ev.time;
        if (fl.remaining <= 0) {
          CompleteFlow(ev.id, ev.time);
        } else if (fl.resources.empty()) {
          fl.rate = fl.cap;
          Push(ev.time + fl.remaining / fl.rate, EventKind::kFlowCheck, ev.id, fl.version);
        } else {
          for (int r : fl.resources) resource_flows_[r].insert(ev.id);
          Reshare(fl.resources, ev.time);
        }
        break;
      }
      case EventKind::kFlowCheck: {
        Flow& fl = flows_[static_cast<size_t>(ev.id)];
        if (fl.done || ev.version != fl.version) break;
        CompleteFlow(ev.id, ev.time);
        break;
      }
    }
  }
  std::vector<std::vector<Seconds>> ends(np);
  for (const Actor& act : actors_) {
    if (act.pc < act.actions->size()) {
      return Err("simulation deadlocked: pipelines[{}].stages[{}] stopped at action {} of {}",
                 act.pipeline, act.stage, act.pc, act.actions->size());
    }
  }
  for (size_t k = 0; k < np; ++k) {
    for (size_t i = 0; i < plan_.pipelines[k].stages.size(); ++i) {
      ends[k].push_back(actors_[static_cast<size_t>(ActorOf(rep_of_[k], static_cast<int>(i)))].end_s);
    }
  }
  return ends;
}

}  // namespace

Simulator::Simulator(const perf::Predictor& predictor) : predictor_(predictor) {}

Result<SimResult> Simulator::Run(const spec::Plan& plan, const SimOptions& options) const {
  const size_t np = plan.pipelines.size();
  const perf::StragglerRates& rates = options.rates;
  // De-duplication: pipelines with the same signature share one simulation.
  std::vector<int> rep_of(np);
  std::map<std::string, int> by_signature;
  for (size_t k = 0; k < np; ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    std::string sig = fmt::format("m{} b{}", pipe.micro_batches, pipe.micro_batch_size);
    for (size_t i = 0; i < pipe.stages.size(); ++i) {
      const spec::StagePlan& st = pipe.stages[i];
      sig += fmt::format("|{} {} {} {} {} {} {}", predictor_.cluster().device(st.devices.front()).type,
                         st.tp_degree, st.first_block, st.num_blocks, st.has_embedding,
                         st.has_head, perf::GroupRate(rates, st.devices));
      if (i + 1 < pipe.stages.size()) {
        const int x = st.devices.front();
        const int y = pipe.stages[i + 1].devices.front();
        sig += x == y ? "=" : predictor_.cluster().LinkBetween(x, y).name;
      }
    }
    if (!options.dedupe_identical_pipelines) sig += fmt::format("#{}", k);
    auto [it, inserted] = by_signature.emplace(sig, static_cast<int>(k));
    rep_of[k] = it->second;
  }
  SimResult result;
  result.pipeline_backward_end_s.assign(np, 0.0);
  result.pipelines_simulated = static_cast<int>(by_signature.size());
  // The step around the pipeline phase is the predictor's; the phase is replayed here. The phase
  // runs twice (the predictor's skew pass and the steady step): keep the second run's outputs.
  MOTLEY_ASSIGN_OR_RETURN(const sched::PlanSchedules schedules, sched::PlanSchedules::Build(plan));
  std::unique_ptr<PhaseRun> last;
  Status failed = Status::Ok();
  const perf::Predictor::PipelinePhase phase =
      [&](const std::vector<std::vector<Seconds>>& ready) -> std::vector<std::vector<Seconds>> {
    result.trace.clear();
    result.events = 0;
    last = std::make_unique<PhaseRun>(predictor_, plan, schedules, options, rep_of, &result);
    auto ends = last->Run(ready);
    if (!ends.ok()) {
      failed = ends.status();
      return ready;
    }
    return *std::move(ends);
  };
  const perf::Prediction pred = predictor_.PredictWith(plan, rates, phase);
  MOTLEY_RETURN_IF_ERROR(failed);
  result.iteration_s = pred.iteration_s;
  const int nd = predictor_.cluster().num_devices();
  result.device_busy_s.assign(static_cast<size_t>(nd), 0.0);
  result.device_idle_s.assign(static_cast<size_t>(nd), 0.0);
  for (size_t k = 0; k < np; ++k) {
    const int rep = rep_of[k];
    result.pipeline_backward_end_s[k] = result.pipeline_backward_end_s[static_cast<size_t>(rep)];
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    for (size_t i = 0; i < pipe.stages.size(); ++i) {
      const Actor& act = last->actors()[static_cast<size_t>(last->ActorOf(rep, static_cast<int>(i)))];
      const perf::StagePrediction& sp = pred.stages[k][i];
      const Seconds busy = act.busy_s + sp.optimizer_s;
      for (int d : pipe.stages[i].devices) {
        result.device_busy_s[static_cast<size_t>(d)] = busy;
        result.device_idle_s[static_cast<size_t>(d)] = result.iteration_s - busy;
      }
      if (options.record_trace && rep == static_cast<int>(k)) {
        result.trace.push_back(TraceEvent{"DP", "dp", static_cast<int>(k), static_cast<int>(i),
                                          sp.dp_start_s, sp.dp_sync_s});
        result.trace.push_back(TraceEvent{"OPT", "optimizer", static_cast<int>(k),
                                          static_cast<int>(i), sp.finish_s - sp.optimizer_s,
                                          sp.optimizer_s});
      }
    }
  }
  return result;
}

}  // namespace motley::sim
