// Straggler scenarios (issue 6; docs/formats/scenario.md): a YAML list of events that change the
// speed of a device or a link from a given optimizer step on, for tests, benchmarks and users who
// want to rehearse (`motley train ... --inject SCENARIO.yaml`). A file gives each event's
// `slowdown`, a factor >= 1 (3 = three times slower, 1 = healthy again), the convention of every
// motley input (`--straggler ID=3`, docs/architecture.md §1); the old key `rate` (a fraction of
// speed) is still read, with a warning. Events store the speed as a fraction of nominal
// (rate = 1 / slowdown), what the emulated backends and the link matrix take.
//
//   - {step: 40, device: 3, slowdown: 3}            # global device id
//   - {step: 40, device: "host-slow:1", slowdown: 2}  # NODE:LOCAL_INDEX (or NODE for a 1-device
//   node)
//   - {step: 60, link: [0, 5], slowdown: 4}          # the pair, both directions
//   - {step: 80, link_class: shm, slowdown: 2}       # every pair the cluster joins by that class
//
// Plain value types; const methods are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "spec/cluster_spec.h"

namespace motley::straggler {

enum class EventTarget : uint8_t { kDevice, kLink, kLinkClass };

struct ScenarioEvent {
  int64_t step = 1;  // first optimizer step (1-based) at the new rate
  EventTarget target = EventTarget::kDevice;
  int device = -1;  // kDevice: global device id
  int link_a = -1;  // kLink: the two devices (link_a < link_b)
  int link_b = -1;
  std::string link_class;  // kLinkClass: a link class of the cluster
  double rate = 1.0;       // fraction of nominal speed, > 0 (1 / the file's slowdown)
};

// (step, rate): from `step` on, the rate (a fraction of nominal speed).
using RateSteps = std::vector<std::pair<int64_t, double>>;

struct Scenario {
  std::vector<ScenarioEvent> events;  // in file order
  std::string source;                 // file name, for messages
  std::vector<std::string> warnings;  // e.g. the old `rate:` key; print them before running

  // The speed of a device in step `step`: the last device event for it with event.step <= step
  // (later in the file wins among equal steps); 1 when none.
  double DeviceSpeedAt(int device, int64_t step) const;
  // The speed of the link a <-> b in step `step`: the last event naming the pair or the class the
  // cluster puts between them (cluster.LinkBetween); 1 when none. a != b.
  double LinkSpeedAt(const spec::ClusterSpec& cluster, int a, int b, int64_t step) const;
  // The device's schedule, sorted by step (equal steps in file order; empty: always 1).
  RateSteps DeviceSchedule(int device) const;
  // The schedule of the pair a <-> b, pair and class events merged, sorted by step.
  RateSteps LinkSchedule(const spec::ClusterSpec& cluster, int a, int b) const;
  // Whether any event targets links (pairs or classes).
  bool has_link_events() const;
};

// Parses scenario YAML against a finalized cluster (device names and link classes are resolved).
// Errors read "<file>: events[2].slowdown: must be a finite factor >= 1 ..., got 0.5" (the event
// index, then the field).
Result<Scenario> ParseScenario(std::string_view yaml_text, std::string_view name_for_errors,
                               const spec::ClusterSpec& cluster);
// Reads a scenario file. Errors: "<path>: <field>: <reason>" or "<path>: cannot read ...".
Result<Scenario> LoadScenario(const std::string& path, const spec::ClusterSpec& cluster);

// The name a scenario may use for a device: "NODE:LOCAL_INDEX".
std::string DeviceName(const spec::ClusterSpec& cluster, int device);

}  // namespace motley::straggler
