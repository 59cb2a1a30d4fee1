// See monitor.h.
#include "straggler/monitor.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace motley::straggler {

RateMonitor::RateMonitor(const spec::ClusterSpec& cluster, MonitorOptions options)
    : cluster_(cluster),
      options_(options),
      devices_(static_cast<size_t>(cluster.num_devices())),
      committed_devices_(static_cast<size_t>(cluster.num_devices()), 1.0) {
  MOTLEY_CHECK(options_.ewma_weight > 0.0 && options_.ewma_weight <= 1.0,
               "MonitorOptions.ewma_weight must be in (0, 1]");
  MOTLEY_CHECK(options_.exit_threshold >= 1.0 && options_.exit_threshold < options_.enter_threshold,
               "MonitorOptions: need 1 <= exit_threshold < enter_threshold");
  MOTLEY_CHECK(options_.persistence >= 1, "MonitorOptions.persistence must be >= 1");
  MOTLEY_CHECK(options_.min_shift > 0.0, "MonitorOptions.min_shift must be > 0");
}

bool RateMonitor::Update(Tracker& t, double raw) const {
  const MonitorOptions& o = options_;
  t.smoothed = o.ewma_weight * raw + (1.0 - o.ewma_weight) * t.smoothed;
  bool deviates = false;
  if (t.committed <= 1.0) {
    deviates = t.smoothed >= o.enter_threshold;
  } else {
    deviates = t.smoothed <= o.exit_threshold ||
               std::abs(t.smoothed - t.committed) >= o.min_shift * t.committed;
  }
  if (!deviates) {
    t.pending.clear();
    return false;
  }
  t.pending.push_back(raw);
  if (static_cast<int>(t.pending.size()) < o.persistence) return false;
  std::vector<double> window = std::move(t.pending);
  t.pending.clear();
  std::sort(window.begin(), window.end());
  const size_t n = window.size();
  double next = n % 2 == 1 ? window[n / 2] : 0.5 * (window[n / 2 - 1] + window[n / 2]);
  if (next < o.enter_threshold) next = 1.0;
  t.smoothed = next;
  if (next == t.committed) return false;
  t.committed = next;
  return true;
}

std::vector<RateChangeRecord> RateMonitor::Report(int64_t step,
                                                  const std::vector<DeviceSample>& devices,
                                                  const std::vector<LinkSample>& links) {
  ++reports_;
  std::vector<RateChangeRecord> changes;
  for (const DeviceSample& s : devices) {
    MOTLEY_CHECK(s.device >= 0 && s.device < cluster_.num_devices(), "DeviceSample.device");
    if (!(s.expected_s > 0.0) || !(s.measured_s > 0.0)) continue;
    Tracker& t = devices_[static_cast<size_t>(s.device)];
    const double before = t.committed;
    if (Update(t, s.measured_s / s.expected_s)) {
      committed_devices_[static_cast<size_t>(s.device)] = t.committed;
      changes.push_back(RateChangeRecord{step, false, s.device, -1, -1, before, t.committed});
    }
  }
  for (const LinkSample& s : links) {
    if (s.a == s.b || !(s.measured_s > 0.0) || !(s.bytes > 0.0)) continue;
    const spec::LinkClass& cls = cluster_.LinkBetween(s.a, s.b);
    const Seconds expected =
        static_cast<double>(std::max<int64_t>(1, s.transfers)) * cls.latency_s +
        s.bytes / cls.EffectiveBandwidth();
    const std::pair<int, int> key{std::min(s.a, s.b), std::max(s.a, s.b)};
    Tracker& t = links_[key];
    const double before = t.committed;
    if (Update(t, s.measured_s / expected)) {
      committed_links_.Set(key.first, key.second, t.committed);
      changes.push_back(
          RateChangeRecord{step, true, -1, key.first, key.second, before, t.committed});
    }
  }
  history_.insert(history_.end(), changes.begin(), changes.end());
  return changes;
}

double RateMonitor::smoothed_device_rate(int device) const {
  return devices_.at(static_cast<size_t>(device)).smoothed;
}

double RateMonitor::link_rate(int a, int b) const {
  const auto it = links_.find({std::min(a, b), std::max(a, b)});
  return it == links_.end() ? 1.0 : it->second.committed;
}

double RateMonitor::smoothed_link_rate(int a, int b) const {
  const auto it = links_.find({std::min(a, b), std::max(a, b)});
  return it == links_.end() ? 1.0 : it->second.smoothed;
}

std::vector<std::pair<std::pair<int, int>, double>> RateMonitor::slow_links() const {
  std::vector<std::pair<std::pair<int, int>, double>> out;
  for (const auto& [key, t] : links_) {
    if (t.committed != 1.0) out.emplace_back(key, t.committed);
  }
  return out;
}

}  // namespace motley::straggler
