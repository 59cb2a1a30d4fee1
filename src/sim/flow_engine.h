// Transfers over the shared network as events in time (docs/architecture.md §8): the dynamic form
// of perf/network.h's flow model, which the simulator's whole-step replay (simulator.cc) drives.
//
// A transfer waits for its queue (transfers over one directed link queue, as the runtime's links
// do; a transfer without a queue starts at once), then pays its latency, then moves its bytes at
// its rate: its own cap when it crosses no shared resource, else the max-min fair share of the
// flows moving bytes over the same resources (perf::FairShare), recomputed whenever a flow starts
// or ends moving bytes. A transfer holds its queue from its start to its arrival, so with sharing
// off it arrives exactly latency + bytes / cap after it started, as perf/step_model.h's Hop::Time.
// Rates are recomputed once per instant, after every flow event of that instant (replicas in
// lockstep start and end their transfers together).
//
// Thread safety: none (one engine per simulation run).
#pragma once

#include <cstdint>
#include <deque>
#include <queue>
#include <unordered_map>
#include <vector>

#include "core/units.h"
#include "perf/network.h"

namespace motley::sim {

class FlowEngine {
 public:
  explicit FlowEngine(const perf::Network& network);

  // A transfer of `bytes` over `path` posted at `now`; `queue` names the link it queues on (any
  // key; -1: it does not queue); `tag` comes back with its arrival.
  void Send(Seconds now, const perf::FlowPath& path, Bytes bytes, int64_t queue, int64_t tag);

  // The time of the next flow event (a transfer starting to move bytes, or arriving); +infinity
  // when none is pending.
  Seconds NextTime() const;
  struct Arrival {
    int64_t tag = 0;
    Seconds time_s = 0;
  };
  // Processes every flow event at time `now` (== NextTime()) and re-shares the rates of the flows
  // whose resources changed; appends the transfers that arrived, in posting order of their
  // events.
  void Advance(Seconds now, std::vector<Arrival>* arrivals);

  int64_t events() const { return events_; }
  int64_t transfers() const { return static_cast<int64_t>(flows_.size()); }

 private:
  struct Flow {
    perf::FlowPath path;
    Bytes remaining = 0;
    BytesPerSecond rate = 0;
    Seconds last_update = 0;
    int64_t queue = -1;
    int64_t tag = 0;
    int version = 0;
    bool moving = false;
  };
  enum class Kind { kStart, kCheck };
  struct Event {
    Seconds time = 0;
    int64_t seq = 0;
    Kind kind = Kind::kStart;
    int flow = 0;
    int version = 0;
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  struct Queue {
    std::deque<int> waiting;
    bool busy = false;
  };

  void Push(Seconds t, Kind kind, int flow, int version) {
    events_queue_.push(Event{t, seq_++, kind, flow, version});
  }
  void Begin(int f, Seconds now);        // the flow takes its queue: latency, then bytes
  void StartMoving(int f, Seconds now);  // after its latency
  void Arrive(int f, Seconds now, std::vector<Arrival>* arrivals);
  void Reshare(Seconds now);  // the flows over dirty_ resources

  const perf::Network& network_;
  std::vector<Flow> flows_;
  std::unordered_map<int64_t, Queue> queues_;
  std::vector<std::vector<int>> moving_on_;  // per resource: the flows moving bytes over it
  std::vector<int> dirty_;                   // resources whose flows changed this instant
  std::vector<char> is_dirty_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_queue_;
  int64_t seq_ = 0;
  int64_t events_ = 0;
};

}  // namespace motley::sim
