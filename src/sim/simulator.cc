// See simulator.h. One actor per simulated stage walks its action list; events are ordered by
// (time, sequence number), so runs are deterministic.
#include "sim/simulator.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include <fmt/format.h>

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
  int pending = 0;  // communication operations of the current batch not yet complete
  perf::StageCost cost;
  Seconds dp_s = 0;
  Seconds optimizer_s = 0;
  std::vector<int> segments;  // DP segments (indices into the simulator's segment list)
  int incomplete_segments = 0;
  bool dp_posted = false;
  bool dp_started = false;
  Seconds busy_s = 0;
  Seconds batch_start_s = 0;
};

struct Flow {
  int sender = 0;    // actor ids
  int receiver = 0;
  Bytes remaining = 0;
  BytesPerSecond cap = 0;
  BytesPerSecond rate = 0;
  Seconds last_update = 0;
  std::vector<int> resources;
  int version = 0;
  bool done = false;
  std::string name;
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

class SimRun {
 public:
  SimRun(const perf::Predictor& predictor, const spec::Plan& plan, const SimOptions& options)
      : predictor_(predictor), plan_(plan), options_(options), network_(predictor.cluster()) {}

  Result<SimResult> Execute();

 private:
  void Push(Seconds t, EventKind kind, int id, int version = 0) {
    events_.push(Event{t, seq_++, kind, id, version});
  }
  void Advance(int a, Seconds now);
  void PostComm(int a, const Action& action, Seconds now);
  void StartFlow(int sender, int receiver, const std::string& name, Seconds now);
  void Reshare(const std::vector<int>& seed_resources, Seconds now);
  void CompleteFlow(int f, Seconds now);
  void PostDp(int a, Seconds now);
  void TryStartDp(int a, Seconds now);
  void Trace(int a, std::string name, const char* cat, Seconds start, Seconds dur) {
    if (!options_.record_trace) return;
    result_.trace.push_back(TraceEvent{std::move(name), cat, actors_[static_cast<size_t>(a)].pipeline,
                                       actors_[static_cast<size_t>(a)].stage, start, dur});
  }
  const spec::StagePlan& StageOf(int a) const {
    const Actor& act = actors_[static_cast<size_t>(a)];
    return plan_.pipelines[static_cast<size_t>(act.pipeline)].stages[static_cast<size_t>(act.stage)];
  }

  const perf::Predictor& predictor_;
  const spec::Plan& plan_;
  const SimOptions& options_;
  NodeNicNetwork network_;
  std::vector<Actor> actors_;
  std::map<std::pair<int, int>, int> actor_of_;  // (pipeline, stage) -> actor
  std::vector<Flow> flows_;
  std::map<int, std::set<int>> resource_flows_;  // active shared flows per resource
  // Rendezvous: (pipeline, boundary, direction, micro-batch) -> actor that posted first.
  std::map<std::tuple<int, int, int, int64_t>, int> posted_;
  std::vector<std::vector<int>> segment_holders_;  // actors per DP segment
  std::vector<int> segment_posted_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t seq_ = 0;
  SimResult result_;
  Seconds end_s_ = 0;
};

void SimRun::Advance(int a, Seconds now) {
  Actor& act = actors_[static_cast<size_t>(a)];
  const std::vector<Action>& list = *act.actions;
  if (act.pc >= list.size()) {
    end_s_ = std::max(end_s_, now);
    return;
  }
  const Action& action = list[act.pc];
  if (sched::IsCommunication(action.kind)) {
    act.batch_start_s = now;
    while (act.pc < list.size() && sched::IsCommunication(list[act.pc].kind)) {
      ++act.pending;
      PostComm(a, list[act.pc], now);
      ++act.pc;
    }
    return;  // resumed when the batch's last transfer completes
  }
  ++act.pc;
  switch (action.kind) {
    case ActionKind::kForward:
    case ActionKind::kBackward: {
      const Seconds d = action.kind == ActionKind::kForward ? act.cost.forward_s : act.cost.backward_s;
      act.busy_s += d;
      if (action.kind == ActionKind::kBackward && action.micro_batch ==
          plan_.pipelines[static_cast<size_t>(act.pipeline)].micro_batches - 1 && act.stage == 0) {
        result_.pipeline_backward_end_s[static_cast<size_t>(act.pipeline)] = now + d;
      }
      Trace(a, sched::ActionToString(action), "compute", now, d);
      Push(now + d, EventKind::kActorReady, a);
      return;
    }
    case ActionKind::kDpSync:
      PostDp(a, now);
      return;
    case ActionKind::kOptimizerStep:
      act.busy_s += act.optimizer_s;
      Trace(a, "OPT", "optimizer", now, act.optimizer_s);
      Push(now + act.optimizer_s, EventKind::kActorReady, a);
      return;
    default:
      MOTLEY_CHECK(false, "unexpected action");
  }
}

void SimRun::PostComm(int a, const Action& action, Seconds now) {
  const Actor& act = actors_[static_cast<size_t>(a)];
  int boundary = 0;
  int direction = 0;  // 0 forward (activation i -> i+1), 1 backward (gradient i+1 -> i)
  switch (action.kind) {
    case ActionKind::kSendForward: boundary = act.stage; direction = 0; break;
    case ActionKind::kRecvForward: boundary = act.stage - 1; direction = 0; break;
    case ActionKind::kSendBackward: boundary = act.stage - 1; direction = 1; break;
    case ActionKind::kRecvBackward: boundary = act.stage; direction = 1; break;
    default: MOTLEY_CHECK(false, "not a communication action");
  }
  const auto key = std::make_tuple(act.pipeline, boundary, direction, action.micro_batch);
  auto it = posted_.find(key);
  if (it == posted_.end()) {
    posted_.emplace(key, a);
    return;
  }
  const int other = it->second;
  posted_.erase(it);
  const bool i_send = action.kind == ActionKind::kSendForward || action.kind == ActionKind::kSendBackward;
  const int sender = i_send ? a : other;
  const int receiver = i_send ? other : a;
  StartFlow(sender, receiver,
            fmt::format("{}{}", direction == 0 ? "act" : "grad", action.micro_batch), now);
}

void SimRun::StartFlow(int sender, int receiver, const std::string& name, Seconds now) {
  const spec::StagePlan& from = StageOf(sender);
  const spec::StagePlan& to = StageOf(receiver);
  Flow flow;
  flow.sender = sender;
  flow.receiver = receiver;
  flow.name = name;
  const int64_t b = plan_.pipelines[static_cast<size_t>(actors_[static_cast<size_t>(sender)].pipeline)]
                        .micro_batch_size;
  flow.remaining = predictor_.ActivationMessageBytes(b);
  const int fid = static_cast<int>(flows_.size());
  Seconds latency = 0;
  if (from.devices.front() == to.devices.front()) {
    flow.remaining = 0;
  } else {
    const PathInfo path = network_.Path(from.devices.front(), to.devices.front());
    latency = path.latency_s;
    flow.cap = path.bandwidth;
    flow.resources = path.resources;
  }
  flows_.push_back(std::move(flow));
  Push(now + latency, EventKind::kFlowStart, fid);
}

void SimRun::Reshare(const std::vector<int>& seed_resources, Seconds now) {
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

void SimRun::CompleteFlow(int f, Seconds now) {
  Flow& fl = flows_[static_cast<size_t>(f)];
  fl.done = true;
  for (int r : fl.resources) resource_flows_[r].erase(f);
  if (!fl.resources.empty()) Reshare(fl.resources, now);
  for (int a : {fl.sender, fl.receiver}) {
    Actor& act = actors_[static_cast<size_t>(a)];
    if (--act.pending == 0) {
      if (a == fl.receiver || a == fl.sender) {
        Trace(a, "p2p", "p2p", act.batch_start_s, now - act.batch_start_s);
      }
      Advance(a, now);
    }
  }
}

void SimRun::PostDp(int a, Seconds now) {
  Actor& act = actors_[static_cast<size_t>(a)];
  act.dp_posted = true;
  act.batch_start_s = now;
  std::vector<int> candidates = {a};
  for (int s : act.segments) {
    if (++segment_posted_[static_cast<size_t>(s)] ==
        static_cast<int>(segment_holders_[static_cast<size_t>(s)].size())) {
      for (int h : segment_holders_[static_cast<size_t>(s)]) {
        --actors_[static_cast<size_t>(h)].incomplete_segments;
        candidates.push_back(h);
      }
    }
  }
  for (int c : candidates) TryStartDp(c, now);
}

void SimRun::TryStartDp(int a, Seconds now) {
  Actor& act = actors_[static_cast<size_t>(a)];
  if (!act.dp_posted || act.dp_started || act.incomplete_segments > 0) return;
  act.dp_started = true;
  Trace(a, "DP", "dp", now, act.dp_s);
  Push(now + act.dp_s, EventKind::kActorReady, a);
}

Result<SimResult> SimRun::Execute() {
  const size_t np = plan_.pipelines.size();
  const perf::StragglerRates& rates = options_.rates;
  // De-duplication: pipelines with the same signature share one simulation.
  std::vector<int> rep_of(np);
  std::map<std::string, int> by_signature;
  for (size_t k = 0; k < np; ++k) {
    const spec::PipelinePlan& pipe = plan_.pipelines[k];
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
    if (!options_.dedupe_identical_pipelines) sig += fmt::format("#{}", k);
    auto [it, inserted] = by_signature.emplace(sig, static_cast<int>(k));
    rep_of[k] = it->second;
  }
  const perf::Predictor::DpGroups dp = predictor_.ComputeDpGroups(plan_);
  std::map<std::vector<int64_t>, sched::Schedule> schedules;
  sched::ScheduleOptions sopt;
  sopt.with_step_actions = true;
  for (size_t k = 0; k < np; ++k) {
    if (rep_of[k] != static_cast<int>(k)) continue;
    const spec::PipelinePlan& pipe = plan_.pipelines[k];
    const std::vector<int64_t> key = {pipe.num_stages(), pipe.micro_batches};
    if (!schedules.count(key)) {
      MOTLEY_ASSIGN_OR_RETURN(sched::Schedule s, sched::BuildSchedule(plan_.schedule, pipe.num_stages(),
                                                                      pipe.micro_batches, sopt));
      schedules.emplace(key, std::move(s));
    }
    const sched::Schedule& schedule = schedules.at(key);
    for (size_t i = 0; i < pipe.stages.size(); ++i) {
      const spec::StagePlan& st = pipe.stages[i];
      Actor act;
      act.pipeline = static_cast<int>(k);
      act.stage = static_cast<int>(i);
      act.actions = &schedule.stages[i];
      act.cost = predictor_.StageCostOf(st, pipe.micro_batch_size, plan_.recompute, rates);
      act.dp_s = dp.sync_s[k][i];
      const double params = perf::StageParamsPerDevice(predictor_.model(), st.num_blocks,
                                                       st.has_embedding, st.has_head, st.tp_degree);
      const bool zero = plan_.optimizer_sharding == spec::OptimizerSharding::kZero1;
      act.optimizer_s = predictor_.OptimizerTime(
          predictor_.cluster().device(st.devices.front()).type,
          zero ? params / static_cast<double>(dp.min_group_size[k][i]) : params,
          perf::GroupRate(rates, st.devices));
      actor_of_[{static_cast<int>(k), static_cast<int>(i)}] = static_cast<int>(actors_.size());
      actors_.push_back(act);
    }
  }
  // DP segments over the simulated actors (holders mapped to their representative).
  for (const auto& seg : dp.segments) {
    std::set<int> holders;
    for (const auto& [k, i] : seg.holders) {
      holders.insert(actor_of_.at({rep_of[static_cast<size_t>(k)], i}));
    }
    const int sid = static_cast<int>(segment_holders_.size());
    segment_holders_.emplace_back(holders.begin(), holders.end());
    segment_posted_.push_back(0);
    for (int h : holders) {
      actors_[static_cast<size_t>(h)].segments.push_back(sid);
      ++actors_[static_cast<size_t>(h)].incomplete_segments;
    }
  }
  result_.pipeline_backward_end_s.assign(np, 0.0);
  result_.pipelines_simulated = static_cast<int>(by_signature.size());
  for (size_t a = 0; a < actors_.size(); ++a) Push(0, EventKind::kActorReady, static_cast<int>(a));
  while (!events_.empty()) {
    const Event ev = events_.top();
    events_.pop();
    ++result_.events;
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
  for (const Actor& act : actors_) {
    if (act.pc < act.actions->size()) {
      return Err("simulation deadlocked: pipelines[{}].stages[{}] stopped at action {} of {}",
                 act.pipeline, act.stage, act.pc, act.actions->size());
    }
  }
  result_.iteration_s = end_s_;
  const int nd = predictor_.cluster().num_devices();
  result_.device_busy_s.assign(static_cast<size_t>(nd), 0.0);
  result_.device_idle_s.assign(static_cast<size_t>(nd), 0.0);
  for (size_t k = 0; k < np; ++k) {
    const int rep = rep_of[k];
    result_.pipeline_backward_end_s[k] = result_.pipeline_backward_end_s[static_cast<size_t>(rep)];
    const spec::PipelinePlan& pipe = plan_.pipelines[k];
    for (size_t i = 0; i < pipe.stages.size(); ++i) {
      const Actor& act = actors_[static_cast<size_t>(actor_of_.at({rep, static_cast<int>(i)}))];
      for (int d : pipe.stages[i].devices) {
        result_.device_busy_s[static_cast<size_t>(d)] = act.busy_s;
        result_.device_idle_s[static_cast<size_t>(d)] = end_s_ - act.busy_s;
      }
    }
  }
  return std::move(result_);
}

}  // namespace

Simulator::Simulator(const perf::Predictor& predictor) : predictor_(predictor) {}

Result<SimResult> Simulator::Run(const spec::Plan& plan, const SimOptions& options) const {
  SimRun run(predictor_, plan, options);
  return run.Execute();
}

}  // namespace motley::sim
