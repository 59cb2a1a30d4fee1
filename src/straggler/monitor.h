// Rate monitor (docs/architecture.md §9, issue 6): the coordinator's view of how slow each device
// and each link is. Every K steps the ranks report, per device, the compute time they measured
// against the time their work should take at the device's profile (the predictor's or the emulated
// profile's time for the same actions), and per link the transfer time they measured for the bytes
// they sent over it; a device taken out of the plan reports a small probe op instead (so that its
// recovery is seen). Rates here are slowdowns, measured / expected time (perf::StragglerRates; 3 =
// three times slower; a scenario's 0.33 speed is a 3.0 slowdown).
//
// Smoothing and hysteresis, per device and per link:
//  - smoothed = EWMA of the reported slowdowns (weight `ewma_weight` on the newest report);
//  - a healthy entity (committed rate 1) deviates when smoothed >= enter_threshold; a straggler
//    (committed c > 1) deviates when smoothed <= exit_threshold (recovery) or when smoothed moved
//    by at least min_shift * c from c;
//  - after `persistence` consecutive deviating reports the change commits: the committed rate
//    becomes the median of those reports' raw slowdowns (the EWMA lags a step change, and the
//    first report after a change mixes old and new steps; the median of the window does not), or
//    1 when that median is below enter_threshold; the EWMA restarts from the committed value.
// With the defaults, jitter of +-20% around healthy (slowdowns in [0.8, 1.2]) can never commit,
// since neither a report nor an EWMA of such reports reaches 1.3. Malleus uses the same shape:
// rates under 1.2 count as healthy, a re-plan needs a move of at least 0.3 (planner-ideas.md).
//
// Blame: device rates come only from compute times, link rates only from transfer times, so a
// slowed link raises its link rate while the compute times of the devices at its ends, and hence
// their rates, stay normal (tested). A link that carries no traffic is not measured: its
// committed rate stays until traffic over it is reported again.
//
// Ownership: keeps a reference to the cluster (LinkBetween gives a link's expected time), which
// must outlive the monitor. Thread safety: not thread-safe; one coordinator thread feeds it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/units.h"
#include "perf/predictor.h"
#include "spec/cluster_spec.h"

namespace motley::straggler {

struct MonitorOptions {
  double ewma_weight = 0.5;      // weight of the newest report in the smoothed rate
  double enter_threshold = 1.3;  // healthy -> straggler (smoothed slowdown)
  double exit_threshold = 1.15;  // straggler -> healthy
  double min_shift = 0.3;        // a straggler's relative move that re-commits its rate
  int persistence = 3;           // consecutive deviating reports before a change commits
};

// One device's compute over the reporting window (seconds summed over its steps).
struct DeviceSample {
  int device = 0;
  Seconds measured_s = 0;  // compute time measured (forward + backward + optimizer actions)
  Seconds expected_s = 0;  // the same work at the device's profile speed; > 0
  bool probe = false;      // from the probe op of a device outside the plan
};

// One link's traffic over the reporting window.
struct LinkSample {
  int a = 0;  // devices at the two ends (either order)
  int b = 0;
  Bytes bytes = 0;         // bytes moved over the link
  int64_t transfers = 1;   // messages (each pays the link's latency once)
  Seconds measured_s = 0;  // transfer time measured (on the wire, not waiting for the peer)
};

// A committed change of one device's or link's rate.
struct RateChangeRecord {
  int64_t step = 0;
  bool is_link = false;
  int device = -1;  // !is_link
  int a = -1;       // is_link (a < b)
  int b = -1;
  double from = 1.0;
  double to = 1.0;
};

class RateMonitor {
 public:
  RateMonitor(const spec::ClusterSpec& cluster, MonitorOptions options = {});

  // Feeds one report (made at step `step`); returns the changes that committed (empty for none).
  // A device or link absent from the report keeps its state. Samples with expected_s <= 0 or
  // bytes <= 0 and measured_s <= 0 are ignored.
  std::vector<RateChangeRecord> Report(int64_t step, const std::vector<DeviceSample>& devices,
                                       const std::vector<LinkSample>& links);

  // Committed slowdowns per global device id (1 = healthy): what the planner is given.
  const perf::StragglerRates& device_rates() const { return committed_devices_; }
  double smoothed_device_rate(int device) const;
  // Committed slowdowns per link (pairs not listed: 1): what the planner is given.
  const perf::LinkRates& link_rates() const { return committed_links_; }
  // Committed and smoothed slowdown of the link a <-> b (1 when never reported).
  double link_rate(int a, int b) const;
  double smoothed_link_rate(int a, int b) const;
  // Links whose committed rate is not 1, as ((a, b), rate) with a < b.
  std::vector<std::pair<std::pair<int, int>, double>> slow_links() const;
  // Every committed change so far, in order.
  const std::vector<RateChangeRecord>& history() const { return history_; }
  int64_t reports() const { return reports_; }
  const MonitorOptions& options() const { return options_; }

  // One entity's state (exposed for tests and metrics).
  struct Tracker {
    double smoothed = 1.0;
    double committed = 1.0;
    std::vector<double> pending;  // raw slowdowns of the consecutive deviating reports
  };

 private:
  // Updates a tracker with a raw slowdown; true when its committed rate changed.
  bool Update(Tracker& t, double raw) const;

  const spec::ClusterSpec& cluster_;
  MonitorOptions options_;
  std::vector<Tracker> devices_;
  perf::StragglerRates committed_devices_;
  std::map<std::pair<int, int>, Tracker> links_;
  perf::LinkRates committed_links_;
  std::vector<RateChangeRecord> history_;
  int64_t reports_ = 0;
};

}  // namespace motley::straggler
