// See simulator.h. A StepReplay holds the state of one run: ranks walking their step-program ops,
// stage actors (a TP group in lockstep) walking their action lists, collectives in progress, and
// the flow engine. Events are ordered by (time, sequence number), flow events before the
// replay's own at one instant, so runs are deterministic.
#include "sim/simulator.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <unordered_map>

#include <fmt/format.h>

#include "perf/comm_model.h"
#include "perf/settings.h"
#include "perf/step_model.h"
#include "sched/schedule.h"
#include "sched/step_program.h"
#include "sim/flow_engine.h"
#include "spec/plan_topology.h"

namespace motley::sim {
namespace {

using sched::Action;
using sched::ActionKind;
using sched::StepOpKind;

constexpr Seconds kInfinity = std::numeric_limits<Seconds>::infinity();

struct RankState {
  int device = 0;
  int pipeline = 0;
  int stage = 0;
  int tp_rank = 0;
  int type = 0;
  double rate = 1;
  size_t pc = 0;  // the next op
  Seconds t = 0;  // the rank's clock
  int pass = 0;
  bool done = false;
  Seconds start_s = 0;  // of the measured step
  Seconds end_s = 0;
  Seconds optimizer_s = 0;  // in the measured step
  Seconds reached_s = 0;    // when it reached its current collective op
};

struct Actor {
  int pipeline = 0;
  int stage = 0;  // device group
  const std::vector<Action>* actions = nullptr;
  std::vector<int> ranks;  // world ranks, TP order
  std::vector<perf::StageCost> cost;  // by model chunk (virtual stage chunk * p + stage)
  size_t pc = 0;
  int waiting = 0;  // receives of the current batch not yet arrived
  bool posted = false;
  int arrived = 0;  // ranks that reached the pipeline op
  Seconds ready_s = 0;
  Seconds batch_start_s = 0;
  int pass = 0;
  Seconds busy_s = 0;  // compute in the measured step
};

// How a collective runs in the replay.
enum class Mode {
  kRingSteps,  // the ring engine, step by step (worlds up to exact_ring_max_ranks)
  kPhases,     // phases of flows (best-algorithm all-reduces; ring-engine rings above the bound)
  kChain,      // the plan agreement's chain broadcast
};

struct CollectiveState {
  bool ready = false;  // allocated
  int entered = 0;
  int exited = 0;
  std::vector<char> in;        // per member: entered
  std::vector<char> out;       // per member: exited
  std::vector<int> next_send;  // kRingSteps: the next step the member sends
  std::vector<int> received;   // kRingSteps: steps received; kChain: 1 once the value arrived
  Seconds start_s = 0;         // kPhases: the latest entry
  size_t phase = 0;
  int pending = 0;  // kPhases: flows of the current phase not yet arrived
};

// What a flow's arrival means.
enum class TransferKind { kMessagePart, kRingStep, kPhaseFlow, kChainHop };
struct Transfer {
  TransferKind kind = TransferKind::kMessagePart;
  int64_t key = 0;  // message key, or pass * collectives + collective
  int member = 0;   // receiving member (ring step, chain hop)
};

struct Message {
  int parts_left = -1;  // -1 until sent
  bool arrived = false;
  int waiting_actor = -1;
};

enum class EventKind { kRankReady, kEnter, kActorReady };
struct Event {
  Seconds time = 0;
  int64_t seq = 0;
  EventKind kind = EventKind::kRankReady;
  int id = 0;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

class StepReplay {
 public:
  StepReplay(const perf::Predictor& predictor, const spec::Plan& plan,
             const sched::StepProgram& program, const SimOptions& options, SimResult* result)
      : predictor_(predictor),
        plan_(plan),
        program_(program),
        options_(options),
        result_(result),
        engine_(predictor.network()) {}

  Status Run();

 private:
  void Push(Seconds t, EventKind kind, int id) { events_.push(Event{t, seq_++, kind, id}); }
  bool Measured(int pass) const { return pass == passes_ - 1; }
  void AdvanceRank(int r, Seconds now);
  void AdvanceActor(int a, Seconds now);
  void FinishActor(int a, Seconds now);
  void SendMessage(int a, const Action& action, Seconds now);
  // The virtual stage an action of actor `act` runs on: chunk * p + device group.
  int VirtualStage(const Actor& act, const Action& action) const {
    return plan_.pipelines[static_cast<size_t>(act.pipeline)].virtual_stage(act.stage,
                                                                            action.chunk);
  }
  int64_t MessageKey(int pass, int pipeline, int boundary, int dir, int64_t micro_batch) const;
  void Enter(int r, Seconds now);
  CollectiveState& StateOf(int pass, size_t c);
  void StartPhase(int pass, size_t c, Seconds now);
  void PumpRing(int pass, size_t c, int q, Seconds now);
  void Exit(int pass, size_t c, int q, Seconds now);
  void OnArrival(const FlowEngine::Arrival& arrival);
  perf::FlowPath PathOf(int from, int to) const {
    return predictor_.PathOf(from, to, options_.links);
  }
  // One queue per directed device link for every transfer (pipeline messages and collective
  // steps alike), as the runtime charges a rank's transfers to one peer on one link.
  int64_t QueueOf(int from, int to) const { return static_cast<int64_t>(from) * num_devices_ + to; }
  int64_t AddTransfer(Transfer t) {
    transfers_.push_back(t);
    return static_cast<int64_t>(transfers_.size()) - 1;
  }
  void Trace(int r, std::string name, const char* category, Seconds start, Seconds duration) {
    if (!options_.record_trace || duration <= 0) return;
    const RankState& rk = ranks_[static_cast<size_t>(r)];
    result_->trace.push_back(
        TraceEvent{std::move(name), category, rk.pipeline, rk.stage, start, duration});
  }

  const perf::Predictor& predictor_;
  const spec::Plan& plan_;
  const sched::StepProgram& program_;
  const SimOptions& options_;
  SimResult* result_;
  FlowEngine engine_;
  int passes_ = 1;
  int64_t num_devices_ = 0;
  std::vector<RankState> ranks_;
  std::vector<Actor> actors_;
  std::vector<int> actor_of_rank_;
  std::vector<std::vector<int>> actor_of_;              // [pipeline][stage]
  std::vector<Mode> mode_;                              // per collective
  std::vector<const perf::CollectiveFlows*> flows_of_;  // kPhases: per collective
  std::vector<std::unique_ptr<perf::CollectiveFlows>> owned_flows_;
  std::vector<perf::Predictor::AllReduceSetTiming> set_timings_;
  std::vector<std::vector<Seconds>> staging_s_;  // per collective, per member (layer collectives)
  std::vector<perf::RingSteps> rings_;           // per collective (ring-engine kinds)
  std::vector<std::vector<int>> member_index_;   // per rank: per op, its index among members
  std::vector<CollectiveState> states_;          // [pass * collectives + c]
  std::unordered_map<int64_t, Message> messages_;
  std::vector<Transfer> transfers_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t seq_ = 0;
  int64_t max_micro_batches_ = 1;
  int64_t max_stages_ = 1;
};

int64_t StepReplay::MessageKey(int pass, int pipeline, int boundary, int dir,
                               int64_t micro_batch) const {
  const auto np = static_cast<int64_t>(plan_.pipelines.size());
  return (((static_cast<int64_t>(pass) * np + pipeline) * max_stages_ + boundary) * 2 + dir) *
             max_micro_batches_ +
         micro_batch;
}

CollectiveState& StepReplay::StateOf(int pass, size_t c) {
  CollectiveState& st = states_[static_cast<size_t>(pass) * program_.collectives.size() + c];
  if (!st.ready) {
    const size_t n = program_.collectives[c].members.size();
    st.ready = true;
    st.in.assign(n, 0);
    st.out.assign(n, 0);
    st.next_send.assign(n, 0);
    st.received.assign(n, 0);
    st.start_s = -kInfinity;
  }
  return st;
}

void StepReplay::AdvanceRank(int r, Seconds now) {
  RankState& rk = ranks_[static_cast<size_t>(r)];
  const std::vector<sched::StepOp>& ops = program_.ranks[static_cast<size_t>(r)].ops;
  if (rk.t > now) {
    Push(rk.t, EventKind::kRankReady, r);
    return;
  }
  while (rk.pc < ops.size()) {
    const sched::StepOp& op = ops[rk.pc];
    if (op.kind == StepOpKind::kPipeline) {
      Actor& act = actors_[static_cast<size_t>(actor_of_rank_[static_cast<size_t>(r)])];
      act.ready_s = std::max(act.ready_s, rk.t);
      if (++act.arrived == static_cast<int>(act.ranks.size())) {
        Push(act.ready_s, EventKind::kActorReady, actor_of_rank_[static_cast<size_t>(r)]);
      }
      return;  // the actor moves the rank on when the stage is done
    }
    if (!sched::IsCollective(op.kind)) {
      const Seconds d = predictor_.LocalOpTime(rk.type, rk.rate, op);
      if (op.kind == StepOpKind::kOptimizer && Measured(rk.pass)) {
        rk.optimizer_s += d;
        if (rk.tp_rank == 0) Trace(r, "optimizer", "optimizer", rk.t, d);
      }
      rk.t += d;
      ++rk.pc;
      continue;
    }
    const size_t c = static_cast<size_t>(op.collective);
    if (sched::IsBetweenSteps(op.kind) && Measured(rk.pass)) {
      rk.done = true;
      rk.end_s = rk.t;
      return;
    }
    if (rk.t > now) {
      Push(rk.t, EventKind::kRankReady, r);  // collectives are entered in time order
      return;
    }
    rk.reached_s = rk.t;
    const std::vector<Seconds>& staging = staging_s_[c];
    const int q = member_index_[static_cast<size_t>(r)][rk.pc];
    const Seconds pack = staging.empty() ? 0.0 : 0.5 * staging[static_cast<size_t>(q)];
    Push(rk.t + pack, EventKind::kEnter, r);
    return;
  }
  if (Measured(rk.pass)) {  // a program without between-step collectives
    rk.done = true;
    rk.end_s = rk.t;
    return;
  }
  // The end of the first step's ops (after the plan agreement): the measured step begins.
  ++rk.pass;
  rk.pc = 0;
  rk.start_s = rk.t;
  Push(rk.t, EventKind::kRankReady, r);
}

void StepReplay::Enter(int r, Seconds now) {
  RankState& rk = ranks_[static_cast<size_t>(r)];
  const sched::StepOp& op = program_.ranks[static_cast<size_t>(r)].ops[rk.pc];
  const auto c = static_cast<size_t>(op.collective);
  const int q = member_index_[static_cast<size_t>(r)][rk.pc];
  CollectiveState& st = StateOf(rk.pass, c);
  st.in[static_cast<size_t>(q)] = 1;
  ++st.entered;
  const sched::Collective& col = program_.collectives[c];
  switch (mode_[c]) {
    case Mode::kPhases:
      st.start_s = std::max(st.start_s, now);
      if (st.entered == static_cast<int>(col.members.size())) StartPhase(rk.pass, c, now);
      return;
    case Mode::kRingSteps: PumpRing(rk.pass, c, q, now); return;
    case Mode::kChain: {
      if (q > 0 && st.received[static_cast<size_t>(q)] == 0) return;  // waits for the value
      if (static_cast<size_t>(q) + 1 < col.members.size()) {
        const int from = ranks_[static_cast<size_t>(col.members[static_cast<size_t>(q)])].device;
        const int to = ranks_[static_cast<size_t>(col.members[static_cast<size_t>(q) + 1])].device;
        const double bytes = static_cast<double>(col.elements) * predictor_.ElementBytesOf(col);
        engine_.Send(
            now, PathOf(from, to), bytes, QueueOf(from, to),
            AddTransfer(Transfer{
                TransferKind::kChainHop,
                static_cast<int64_t>(rk.pass) * static_cast<int64_t>(program_.collectives.size()) +
                    static_cast<int64_t>(c),
                q + 1}));
      }
      Exit(rk.pass, c, q, now);
      return;
    }
  }
}

void StepReplay::StartPhase(int pass, size_t c, Seconds now) {
  CollectiveState& st = StateOf(pass, c);
  const perf::CollectiveFlows& flows = *flows_of_[c];
  while (st.phase < flows.phases.size() && flows.phases[st.phase].flows.empty()) ++st.phase;
  if (st.phase >= flows.phases.size()) {
    for (size_t q = 0; q < program_.collectives[c].members.size(); ++q) {
      Exit(pass, c, static_cast<int>(q), now);
    }
    return;
  }
  const perf::FlowPhase& phase = flows.phases[st.phase];
  st.pending = static_cast<int>(phase.flows.size());
  const int64_t key =
      static_cast<int64_t>(pass) * static_cast<int64_t>(program_.collectives.size()) +
      static_cast<int64_t>(c);
  for (const perf::PhaseFlow& f : phase.flows) {
    perf::FlowPath path = PathOf(f.from, f.to);
    path.latency_s *= f.latencies;
    engine_.Send(now, path, f.bytes, -1, AddTransfer(Transfer{TransferKind::kPhaseFlow, key, 0}));
  }
}

void StepReplay::PumpRing(int pass, size_t c, int q, Seconds now) {
  CollectiveState& st = StateOf(pass, c);
  const sched::Collective& col = program_.collectives[c];
  const auto qs = static_cast<size_t>(q);
  if (st.in[qs] == 0 || st.out[qs] != 0) return;
  const perf::RingSteps& ring = rings_[c];
  const size_t n = col.members.size();
  const int64_t key =
      static_cast<int64_t>(pass) * static_cast<int64_t>(program_.collectives.size()) +
      static_cast<int64_t>(c);
  // Member q sends step s once it holds step s - 1's chunk (eager: the sends queue on the link).
  while (st.next_send[qs] < ring.steps && st.next_send[qs] <= st.received[qs]) {
    const int s = st.next_send[qs]++;
    const int from = ranks_[static_cast<size_t>(col.members[qs])].device;
    const int to = ranks_[static_cast<size_t>(col.members[(qs + 1) % n])].device;
    engine_.Send(
        now, PathOf(from, to), ring.chunk_bytes(s, q), QueueOf(from, to),
        AddTransfer(Transfer{TransferKind::kRingStep, key, static_cast<int>((qs + 1) % n)}));
  }
  if (st.received[qs] >= ring.steps) Exit(pass, c, q, now);
}

void StepReplay::Exit(int pass, size_t c, int q, Seconds now) {
  CollectiveState& st = StateOf(pass, c);
  if (st.out[static_cast<size_t>(q)] != 0) return;
  st.out[static_cast<size_t>(q)] = 1;
  ++st.exited;
  const sched::Collective& col = program_.collectives[c];
  const int r = col.members[static_cast<size_t>(q)];
  RankState& rk = ranks_[static_cast<size_t>(r)];
  const std::vector<Seconds>& staging = staging_s_[c];
  const bool unpacked = col.kind != StepOpKind::kLayerReduceScatter;
  rk.t = now + (staging.empty() || !unpacked ? 0.0 : 0.5 * staging[static_cast<size_t>(q)]);
  if (Measured(pass) && col.layer >= 0 && rk.tp_rank == 0) {
    Trace(r, fmt::format("{} {}", sched::StepOpKindName(col.kind), col.layer), "dp", rk.reached_s,
          rk.t - rk.reached_s);
  }
  ++rk.pc;
  Push(rk.t, EventKind::kRankReady, r);
}

void StepReplay::AdvanceActor(int a, Seconds now) {
  Actor& act = actors_[static_cast<size_t>(a)];
  const std::vector<Action>& list = *act.actions;
  const bool measured = Measured(act.pass);
  while (act.pc < list.size()) {
    const Action& action = list[act.pc];
    if (!sched::IsCommunication(action.kind)) {
      ++act.pc;
      const perf::StageCost& cost = act.cost[static_cast<size_t>(action.chunk)];
      const Seconds d = action.kind == ActionKind::kForward ? cost.forward_s : cost.backward_s;
      if (measured) {
        act.busy_s += d;
        if (action.kind == ActionKind::kBackward && act.stage == 0 && action.chunk == 0 &&
            action.micro_batch ==
                plan_.pipelines[static_cast<size_t>(act.pipeline)].micro_batches - 1) {
          result_->pipeline_backward_end_s[static_cast<size_t>(act.pipeline)] = now + d;
        }
        Trace(act.ranks.front(), sched::ActionToString(action), "compute", now, d);
      }
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
          SendMessage(a, x, now);
          continue;
        }
        const bool fwd = x.kind == ActionKind::kRecvForward;
        const int s = VirtualStage(act, x);
        const int boundary = fwd ? s - 1 : s;
        Message& msg =
            messages_[MessageKey(act.pass, act.pipeline, boundary, fwd ? 0 : 1, x.micro_batch)];
        if (!msg.arrived) {
          msg.waiting_actor = a;
          ++act.waiting;
        }
      }
    }
    if (act.waiting > 0) return;  // resumed by the last arriving receive
    if (measured)
      Trace(act.ranks.front(), "p2p", "p2p", act.batch_start_s, now - act.batch_start_s);
    act.posted = false;
    act.pc = end;
  }
  FinishActor(a, now);
}

void StepReplay::FinishActor(int a, Seconds now) {
  Actor& act = actors_[static_cast<size_t>(a)];
  act.pc = 0;
  act.arrived = 0;
  act.ready_s = 0;
  ++act.pass;
  for (int r : act.ranks) {
    RankState& rk = ranks_[static_cast<size_t>(r)];
    rk.t = now;
    ++rk.pc;  // past the pipeline op
    AdvanceRank(r, now);
  }
}

void StepReplay::SendMessage(int a, const Action& action, Seconds now) {
  const Actor& act = actors_[static_cast<size_t>(a)];
  const bool fwd = action.kind == ActionKind::kSendForward;
  const int s = VirtualStage(act, action);
  const int boundary = fwd ? s : s - 1;
  const spec::PipelinePlan& pipe = plan_.pipelines[static_cast<size_t>(act.pipeline)];
  const spec::StagePlan& from = pipe.stages[static_cast<size_t>(s)];
  const spec::StagePlan& to = pipe.stages[static_cast<size_t>(fwd ? s + 1 : s - 1)];
  const int64_t key = MessageKey(act.pass, act.pipeline, boundary, fwd ? 0 : 1, action.micro_batch);
  messages_[key].parts_left = static_cast<int>(to.devices.size());
  const Bytes bytes = predictor_.ActivationMessageBytes(pipe.micro_batch_size);
  const int64_t tag = AddTransfer(Transfer{TransferKind::kMessagePart, key, 0});
  for (size_t j = 0; j < to.devices.size(); ++j) {
    const int x =
        from.devices[static_cast<size_t>(spec::BoundaryPeer(static_cast<int>(j), from.tp_degree))];
    const int y = to.devices[j];
    if (x == y) {
      engine_.Send(now, perf::FlowPath{0.0, 1e30, {}, 0}, 0.0, -1, tag);
      continue;
    }
    engine_.Send(now, PathOf(x, y), bytes, QueueOf(x, y), tag);
  }
}

void StepReplay::OnArrival(const FlowEngine::Arrival& arrival) {
  const Transfer& tr = transfers_[static_cast<size_t>(arrival.tag)];
  const Seconds now = arrival.time_s;
  const auto nc = static_cast<int64_t>(program_.collectives.size());
  switch (tr.kind) {
    case TransferKind::kMessagePart: {
      Message& msg = messages_[tr.key];
      if (--msg.parts_left > 0) return;
      msg.arrived = true;
      if (msg.waiting_actor < 0) return;
      Actor& act = actors_[static_cast<size_t>(msg.waiting_actor)];
      if (--act.waiting == 0) AdvanceActor(msg.waiting_actor, now);
      return;
    }
    case TransferKind::kRingStep: {
      const int pass = static_cast<int>(tr.key / nc);
      const auto c = static_cast<size_t>(tr.key % nc);
      CollectiveState& st = StateOf(pass, c);
      ++st.received[static_cast<size_t>(tr.member)];
      PumpRing(pass, c, tr.member, now);
      return;
    }
    case TransferKind::kPhaseFlow: {
      const int pass = static_cast<int>(tr.key / nc);
      const auto c = static_cast<size_t>(tr.key % nc);
      CollectiveState& st = StateOf(pass, c);
      if (--st.pending > 0) return;
      ++st.phase;
      StartPhase(pass, c, now);
      return;
    }
    case TransferKind::kChainHop: {
      const int pass = static_cast<int>(tr.key / nc);
      const auto c = static_cast<size_t>(tr.key % nc);
      CollectiveState& st = StateOf(pass, c);
      st.received[static_cast<size_t>(tr.member)] = 1;
      if (st.in[static_cast<size_t>(tr.member)] == 0) return;  // forwards when it enters
      const int r = program_.collectives[c].members[static_cast<size_t>(tr.member)];
      // Enter() forwards and exits; the rank's clock is the arrival.
      ranks_[static_cast<size_t>(r)].t = now;
      --st.entered;
      Enter(r, now);
      return;
    }
  }
}

Status StepReplay::Run() {
  const spec::ClusterSpec& cluster = predictor_.cluster();
  const perf::PerfSettings& settings = predictor_.settings();
  num_devices_ = cluster.num_devices();
  const size_t n = program_.ranks.size();
  const bool exact = static_cast<int>(n) <= settings.exact_ring_max_ranks;
  passes_ = exact && n > 1 ? 2 : 1;
  const size_t np = plan_.pipelines.size();
  for (const spec::PipelinePlan& pipe : plan_.pipelines) {
    max_micro_batches_ = std::max(max_micro_batches_, pipe.micro_batches);
    max_stages_ = std::max(max_stages_, static_cast<int64_t>(pipe.stages.size()));
  }
  result_->pipeline_backward_end_s.assign(np, 0.0);

  // Ranks and stage actors.
  ranks_.resize(n);
  actor_of_rank_.assign(n, -1);
  actor_of_.resize(np);
  for (size_t k = 0; k < np; ++k) actor_of_[k].assign(plan_.pipelines[k].stages.size(), -1);
  for (size_t r = 0; r < n; ++r) {
    const sched::RankStep& rs = program_.ranks[r];
    MOTLEY_CHECK(!rs.idle(), "the simulator replays the plan's devices only");
    const spec::StagePlan& st =
        plan_.pipelines[static_cast<size_t>(rs.pipeline)].stages[static_cast<size_t>(rs.stage)];
    RankState& rk = ranks_[r];
    rk.device = rs.device;
    rk.pipeline = rs.pipeline;
    rk.stage = rs.stage;
    rk.tp_rank = rs.tp_rank;
    rk.type = cluster.device(rs.device).type;
    rk.rate = perf::GroupRate(options_.rates, st.devices);
    int& a = actor_of_[static_cast<size_t>(rs.pipeline)][static_cast<size_t>(rs.stage)];
    if (a < 0) {
      a = static_cast<int>(actors_.size());
      Actor act;
      act.pipeline = rs.pipeline;
      act.stage = rs.stage;
      act.actions = &program_.schedules.of(static_cast<size_t>(rs.pipeline))
                         .stages[static_cast<size_t>(rs.stage)];
      const spec::PipelinePlan& pipe = plan_.pipelines[static_cast<size_t>(rs.pipeline)];
      for (const sched::ChunkStep& chunk : rs.chunks) {
        const spec::StagePlan& cs = pipe.stages[static_cast<size_t>(chunk.virtual_stage)];
        act.cost.push_back(predictor_.StageCostOf(cs, pipe.micro_batch_size, cs.recompute,
                                                  options_.rates, options_.links));
      }
      actors_.push_back(std::move(act));
    }
    actors_[static_cast<size_t>(a)].ranks.push_back(static_cast<int>(r));
    actor_of_rank_[r] = a;
  }
  for (Actor& act : actors_) {
    std::sort(act.ranks.begin(), act.ranks.end(), [&](int x, int y) {
      return ranks_[static_cast<size_t>(x)].tp_rank < ranks_[static_cast<size_t>(y)].tp_rank;
    });
  }

  // How each collective runs: mode, staging, ring steps or phases.
  const size_t nc = program_.collectives.size();
  mode_.assign(nc, Mode::kRingSteps);
  flows_of_.assign(nc, nullptr);
  staging_s_.assign(nc, {});
  rings_.assign(nc, {});
  states_.assign(static_cast<size_t>(passes_) * nc, CollectiveState{});
  set_timings_.reserve(nc);  // at most one per collective: flows_of_ points into it
  for (const auto& [first, end] : sched::ConcurrentCollectiveSets(program_)) {
    const sched::Collective& head = program_.collectives[first];
    if (!predictor_.UsesBestAllReduce(head.kind)) continue;
    std::vector<std::vector<int>> groups;
    for (size_t c = first; c < end; ++c) {
      groups.push_back(sched::CollectiveDevices(program_, program_.collectives[c]));
    }
    set_timings_.push_back(predictor_.TimeAllReduceSet(
        groups, static_cast<double>(head.elements) * predictor_.ElementBytesOf(head),
        options_.links));
    for (size_t c = first; c < end; ++c) {
      mode_[c] = Mode::kPhases;
      flows_of_[c] = &set_timings_.back().flows[c - first];
    }
  }
  for (size_t c = 0; c < nc; ++c) {
    const sched::Collective& col = program_.collectives[c];
    const double eb = predictor_.ElementBytesOf(col);
    if (col.layer >= 0) {
      for (int m : col.members) {
        const RankState& rk = ranks_[static_cast<size_t>(m)];
        const int tp = program_.ranks[static_cast<size_t>(m)].tp_degree;
        const double params = static_cast<double>(
            spec::LayerParamsPerTpRank(predictor_.model(), col.layer, tp).total());
        staging_s_[c].push_back(predictor_.StagingTime(rk.type, rk.rate, params));
      }
    }
    if (col.kind == StepOpKind::kPlanAgreement) {
      mode_[c] = Mode::kChain;
      continue;
    }
    if (mode_[c] == Mode::kPhases) continue;
    rings_[c] = perf::RingStepsOf(col, eb);
    if (exact || col.members.size() < 2) continue;
    // Above the bound: the ring as one phase, each hop one flow of every step's latency and the
    // largest chunk per step (the predictor's bound).
    const Bytes largest = rings_[c].largest_chunk;
    std::vector<int> ring;
    for (int m : col.members) ring.push_back(ranks_[static_cast<size_t>(m)].device);
    auto flows = std::make_unique<perf::CollectiveFlows>();
    flows->phases.push_back(perf::RingPhase(ring, rings_[c].steps, largest));
    mode_[c] = Mode::kPhases;
    flows_of_[c] = flows.get();
    owned_flows_.push_back(std::move(flows));
  }
  member_index_.resize(n);
  for (size_t r = 0; r < n; ++r) {
    const std::vector<sched::StepOp>& ops = program_.ranks[r].ops;
    member_index_[r].assign(ops.size(), -1);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!sched::IsCollective(ops[i].kind)) continue;
      const std::vector<int>& members =
          program_.collectives[static_cast<size_t>(ops[i].collective)].members;
      member_index_[r][i] = static_cast<int>(
          std::lower_bound(members.begin(), members.end(), static_cast<int>(r)) - members.begin());
    }
  }

  for (size_t r = 0; r < n; ++r) Push(0.0, EventKind::kRankReady, static_cast<int>(r));
  std::vector<FlowEngine::Arrival> arrivals;
  int64_t replay_events = 0;
  while (true) {
    const Seconds t_flow = engine_.NextTime();
    const Seconds t_event = events_.empty() ? kInfinity : events_.top().time;
    if (t_flow == kInfinity && t_event == kInfinity) break;
    if (t_flow <= t_event) {
      arrivals.clear();
      engine_.Advance(t_flow, &arrivals);
      for (const FlowEngine::Arrival& a : arrivals) OnArrival(a);
      continue;
    }
    const Event ev = events_.top();
    events_.pop();
    ++replay_events;
    switch (ev.kind) {
      case EventKind::kRankReady: AdvanceRank(ev.id, ev.time); break;
      case EventKind::kEnter: Enter(ev.id, ev.time); break;
      case EventKind::kActorReady: AdvanceActor(ev.id, ev.time); break;
    }
  }
  result_->events = replay_events + engine_.events();
  result_->transfers = engine_.transfers();
  for (size_t r = 0; r < n; ++r) {
    const RankState& rk = ranks_[r];
    if (rk.done) continue;
    const std::vector<sched::StepOp>& ops = program_.ranks[r].ops;
    return Err("simulation stopped before rank {} (device {}) finished: step {}, op {} of {} ({})",
               r, rk.device, rk.pass + 1, rk.pc, ops.size(),
               rk.pc < ops.size() ? sched::StepOpKindName(ops[rk.pc].kind) : "end");
  }

  // The measured step: from the earliest rank's start to the latest rank's end.
  Seconds origin = kInfinity;
  Seconds last = -kInfinity;
  for (const RankState& rk : ranks_) {
    origin = std::min(origin, rk.start_s);
    last = std::max(last, rk.end_s);
  }
  if (n == 0) origin = last = 0;
  result_->iteration_s = last - origin;
  for (Seconds& t : result_->pipeline_backward_end_s) t -= origin;
  for (TraceEvent& e : result_->trace) e.start_s -= origin;
  const int nd = cluster.num_devices();
  result_->device_busy_s.assign(static_cast<size_t>(nd), 0.0);
  result_->device_idle_s.assign(static_cast<size_t>(nd), 0.0);
  for (size_t r = 0; r < n; ++r) {
    const RankState& rk = ranks_[r];
    const Seconds busy = actors_[static_cast<size_t>(actor_of_rank_[r])].busy_s + rk.optimizer_s;
    result_->device_busy_s[static_cast<size_t>(rk.device)] = busy;
    result_->device_idle_s[static_cast<size_t>(rk.device)] = result_->iteration_s - busy;
  }
  return Status::Ok();
}

}  // namespace

Simulator::Simulator(const perf::Predictor& predictor) : predictor_(predictor) {}

Result<SimResult> Simulator::Run(const spec::Plan& plan, const SimOptions& options) const {
  sched::StepProgramOptions program_options;
  program_options.with_actions = false;  // the actors read the program's schedules
  MOTLEY_ASSIGN_OR_RETURN(const sched::StepProgram program,
                          sched::BuildStepProgram(plan, predictor_.model(),
                                                  predictor_.train().seq_len, program_options));
  SimResult result;
  StepReplay replay(predictor_, plan, program, options, &result);
  MOTLEY_RETURN_IF_ERROR(replay.Run());
  return result;
}

}  // namespace motley::sim
