// See flow_engine.h.
#include "sim/flow_engine.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace motley::sim {

FlowEngine::FlowEngine(const perf::Network& network) : network_(network) {
  moving_on_.resize(network.capacities().size());
  is_dirty_.assign(network.capacities().size(), 0);
}

void FlowEngine::Send(Seconds now, const perf::FlowPath& path, Bytes bytes, int64_t queue,
                      int64_t tag) {
  const int f = static_cast<int>(flows_.size());
  Flow flow;
  flow.path = path;
  flow.remaining = bytes;
  flow.last_update = now;
  flow.queue = queue;
  flow.tag = tag;
  flows_.push_back(flow);
  if (queue >= 0) {
    Queue& q = queues_[queue];
    if (q.busy) {
      q.waiting.push_back(f);
      return;
    }
    q.busy = true;
  }
  Begin(f, now);
}

void FlowEngine::Begin(int f, Seconds now) {
  Push(now + flows_[static_cast<size_t>(f)].path.latency_s, Kind::kStart, f, 0);
}

Seconds FlowEngine::NextTime() const {
  return events_queue_.empty() ? std::numeric_limits<Seconds>::infinity()
                               : events_queue_.top().time;
}

void FlowEngine::Advance(Seconds now, std::vector<Arrival>* arrivals) {
  while (!events_queue_.empty() && events_queue_.top().time <= now) {
    const Event ev = events_queue_.top();
    events_queue_.pop();
    ++events_;
    Flow& fl = flows_[static_cast<size_t>(ev.flow)];
    if (ev.kind == Kind::kStart) {
      StartMoving(ev.flow, now);
    } else if (fl.moving && ev.version == fl.version) {
      Arrive(ev.flow, now, arrivals);
    }
  }
  if (!dirty_.empty()) Reshare(now);
}

void FlowEngine::StartMoving(int f, Seconds now) {
  Flow& fl = flows_[static_cast<size_t>(f)];
  fl.last_update = now;
  fl.moving = true;
  if (fl.remaining <= 0 || fl.path.num_resources == 0) {
    fl.rate = fl.path.cap;
    const Seconds t = fl.remaining <= 0 ? now : now + fl.remaining / fl.rate;
    Push(t, Kind::kCheck, f, fl.version);
    return;
  }
  for (int i = 0; i < fl.path.num_resources; ++i) {
    const auto r = static_cast<size_t>(fl.path.resources[static_cast<size_t>(i)]);
    moving_on_[r].push_back(f);
    if (is_dirty_[r] == 0) {
      is_dirty_[r] = 1;
      dirty_.push_back(static_cast<int>(r));
    }
  }
}

void FlowEngine::Arrive(int f, Seconds now, std::vector<Arrival>* arrivals) {
  Flow& fl = flows_[static_cast<size_t>(f)];
  fl.moving = false;
  fl.remaining = 0;
  for (int i = 0; i < fl.path.num_resources; ++i) {
    const auto r = static_cast<size_t>(fl.path.resources[static_cast<size_t>(i)]);
    std::vector<int>& on = moving_on_[r];
    auto it = std::find(on.begin(), on.end(), f);
    MOTLEY_CHECK(it != on.end(), "a moving flow is listed on its resources");
    *it = on.back();
    on.pop_back();
    if (is_dirty_[r] == 0) {
      is_dirty_[r] = 1;
      dirty_.push_back(static_cast<int>(r));
    }
  }
  arrivals->push_back(Arrival{fl.tag, now});
  if (fl.queue < 0) return;
  Queue& q = queues_[fl.queue];
  if (q.waiting.empty()) {
    q.busy = false;
    return;
  }
  const int next = q.waiting.front();
  q.waiting.pop_front();
  Begin(next, now);
}

void FlowEngine::Reshare(Seconds now) {
  // The flows reachable from the dirty resources through the resources they cross.
  std::vector<int> component;
  std::vector<char> in_component;  // by flow, sized lazily
  std::vector<int> stack = dirty_;
  std::vector<char> seen(is_dirty_.size(), 0);
  for (int r : dirty_) seen[static_cast<size_t>(r)] = 1;
  while (!stack.empty()) {
    const int r = stack.back();
    stack.pop_back();
    for (int f : moving_on_[static_cast<size_t>(r)]) {
      if (static_cast<size_t>(f) >= in_component.size()) in_component.resize(flows_.size(), 0);
      if (in_component[static_cast<size_t>(f)] != 0) continue;
      in_component[static_cast<size_t>(f)] = 1;
      component.push_back(f);
      const perf::FlowPath& p = flows_[static_cast<size_t>(f)].path;
      for (int i = 0; i < p.num_resources; ++i) {
        const auto r2 = static_cast<size_t>(p.resources[static_cast<size_t>(i)]);
        if (seen[r2] == 0) {
          seen[r2] = 1;
          stack.push_back(static_cast<int>(r2));
        }
      }
    }
  }
  for (int r : dirty_) is_dirty_[static_cast<size_t>(r)] = 0;
  dirty_.clear();
  if (component.empty()) return;
  std::vector<perf::FlowPath> paths;
  std::vector<BytesPerSecond> caps;
  paths.reserve(component.size());
  caps.reserve(component.size());
  for (int f : component) {
    Flow& fl = flows_[static_cast<size_t>(f)];
    fl.remaining = std::max(0.0, fl.remaining - fl.rate * (now - fl.last_update));
    fl.last_update = now;
    paths.push_back(fl.path);
    caps.push_back(fl.path.cap);
  }
  const std::vector<BytesPerSecond> rates = perf::FairShare(paths, caps, network_.capacities());
  for (size_t i = 0; i < component.size(); ++i) {
    Flow& fl = flows_[static_cast<size_t>(component[i])];
    fl.rate = rates[i];
    ++fl.version;
    Push(now + fl.remaining / fl.rate, Kind::kCheck, component[i], fl.version);
  }
}

}  // namespace motley::sim
