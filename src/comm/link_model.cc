// See link_model.h.
#include "comm/link_model.h"

#include <algorithm>
#include <cmath>

namespace motley::comm {

void LinkTraffic::Reset(int world_size) {
  const auto n = static_cast<size_t>(world_size);
  bytes.assign(n, 0.0);
  transfers.assign(n, 0);
  seconds.assign(n, 0.0);
}

LinkMatrix::LinkMatrix(int world_size, LinkModel default_link)
    : n_(world_size),
      links_(static_cast<size_t>(world_size) * static_cast<size_t>(world_size), default_link) {
  MOTLEY_CHECK(world_size > 0, "LinkMatrix needs at least one rank");
}

size_t LinkMatrix::Index(int src, int dst) const {
  MOTLEY_CHECK(src >= 0 && src < n_ && dst >= 0 && dst < n_, "LinkMatrix rank out of range");
  return static_cast<size_t>(src) * static_cast<size_t>(n_) + static_cast<size_t>(dst);
}

const LinkModel& LinkMatrix::link(int src, int dst) const {
  return links_[Index(src, dst)];
}

void LinkMatrix::Set(int src, int dst, LinkModel link) {
  MOTLEY_CHECK(src >= 0 && src < n_ && dst >= 0 && dst < n_, "LinkMatrix rank out of range");
  links_[static_cast<size_t>(src) * static_cast<size_t>(n_) + static_cast<size_t>(dst)] = link;
}

void LinkMatrix::SetBoth(int a, int b, LinkModel link) {
  Set(a, b, link);
  Set(b, a, link);
}

Status LinkMatrix::Validate() const {
  for (int s = 0; s < n_; ++s) {
    for (int d = 0; d < n_; ++d) {
      const LinkModel& l = link(s, d);
      if (!(l.latency_s >= 0.0) || std::isinf(l.latency_s)) {
        return Err("link {}->{}: latency_s: must be finite and >= 0, got {}", s, d, l.latency_s);
      }
      if (!(l.bandwidth_bytes_per_s > 0.0)) {
        return Err("link {}->{}: bandwidth_bytes_per_s: must be > 0, got {}", s, d,
                   l.bandwidth_bytes_per_s);
      }
    }
  }
  return Status::Ok();
}

void LinkMatrix::SetRateSchedule(int a, int b, std::vector<LinkRateChange> schedule) {
  for (const LinkRateChange& c : schedule) {
    MOTLEY_CHECK(c.rate > 0.0, "LinkMatrix::SetRateSchedule: rate must be > 0");
  }
  std::stable_sort(
      schedule.begin(), schedule.end(),
      [](const LinkRateChange& x, const LinkRateChange& y) { return x.step < y.step; });
  if (schedules_.empty()) schedules_.resize(links_.size());
  schedules_[Index(a, b)] = schedule;
  schedules_[Index(b, a)] = std::move(schedule);
}

double LinkMatrix::RateAt(int src, int dst, int64_t step) const {
  const size_t i = Index(src, dst);
  if (schedules_.empty()) return 1.0;
  double rate = 1.0;
  for (const LinkRateChange& c : schedules_[i]) {
    if (c.step > step) break;
    rate = c.rate;
  }
  return rate;
}

LinkModel LinkMatrix::LinkAt(int src, int dst, int64_t step) const {
  LinkModel l = link(src, dst);
  const double rate = RateAt(src, dst, step);
  if (rate != 1.0) {
    l.latency_s /= rate;
    l.bandwidth_bytes_per_s *= rate;
  }
  return l;
}

Seconds RingStepTime(const std::vector<LinkModel>& ring_links, Bytes step_bytes) {
  Seconds worst = 0.0;
  for (const LinkModel& l : ring_links) worst = std::max(worst, l.TransferTime(step_bytes));
  return worst;
}

Seconds RingAllReduceTime(const std::vector<LinkModel>& ring_links, Bytes bytes) {
  const double n = static_cast<double>(ring_links.size());
  if (ring_links.size() < 2) return 0.0;
  return 2.0 * (n - 1.0) * RingStepTime(ring_links, bytes / n);
}

Seconds RingReduceScatterTime(const std::vector<LinkModel>& ring_links, Bytes bytes) {
  const double n = static_cast<double>(ring_links.size());
  if (ring_links.size() < 2) return 0.0;
  return (n - 1.0) * RingStepTime(ring_links, bytes / n);
}

Seconds RingAllGatherTime(const std::vector<LinkModel>& ring_links, Bytes bytes) {
  return RingReduceScatterTime(ring_links, bytes);
}

}  // namespace motley::comm
