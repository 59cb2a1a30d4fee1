// Link emulation data (docs/architecture.md §6): the latency and bandwidth charged for a transfer
// between two ranks, and the alpha-beta times of the ring collectives that run over such links. The
// runtime fills a LinkMatrix from the cluster spec's link classes; tests build one by hand.
// Straggler hook (issue 6): a per-pair rate schedule (LinkRateChange) slows a link from a given
// step on; LinkAt(src, dst, step) is the link as charged in that step, and a communicator whose
// Emulation carries the rank's step counter charges it.
// Value types; thread-compatible (read-only sharing between rank threads is safe; set schedules
// before the ranks start).
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "core/units.h"

namespace motley::comm {

struct LinkModel {
  Seconds latency_s = 0.0;
  BytesPerSecond bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
  // Time to move `bytes` over this link: latency + bytes / bandwidth.
  Seconds TransferTime(Bytes bytes) const { return latency_s + bytes / bandwidth_bytes_per_s; }
};

// One entry of a link's straggler schedule: from step `step` on (1-based optimizer steps), the
// link runs at `rate` times its nominal speed (0.5 = every transfer takes twice as long: latency
// divided and bandwidth multiplied by the rate).
struct LinkRateChange {
  int64_t step = 0;
  double rate = 1.0;
};

// Directed links between world ranks: link(src, dst). Every pair starts as `default_link`.
class LinkMatrix {
 public:
  LinkMatrix(int world_size, LinkModel default_link);
  int world_size() const { return n_; }
  const LinkModel& link(int src, int dst) const;
  void Set(int src, int dst, LinkModel link);          // one direction
  void SetBoth(int a, int b, LinkModel link);          // both directions
  // Checks that every latency is >= 0 and every bandwidth > 0.
  Status Validate() const;

  // Replaces the rate schedule of the pair a <-> b (both directions); entries need not be sorted,
  // every rate must be > 0 (checked). An empty schedule restores the nominal link.
  void SetRateSchedule(int a, int b, std::vector<LinkRateChange> schedule);
  // The rate of src -> dst in step `step`: the last entry with entry.step <= step (1 when none).
  double RateAt(int src, int dst, int64_t step) const;
  // link(src, dst) as charged in step `step`: latency / rate, bandwidth * rate.
  LinkModel LinkAt(int src, int dst, int64_t step) const;

 private:
  size_t Index(int src, int dst) const;
  int n_;
  std::vector<LinkModel> links_;                        // n_ * n_, row = src
  std::vector<std::vector<LinkRateChange>> schedules_;  // n_ * n_ (sorted by step), or empty
};

// What one rank sent over its emulated links (the straggler monitor's link samples,
// docs/architecture.md §9), per destination world rank: bytes charged, transfers (each pays the
// link's latency once) and seconds on the wire (from the moment the link is free for the transfer
// to its arrival, so waiting for the peer or for earlier transfers is not counted). Written by the
// rank's communicators (the rank's thread) when Emulation::traffic points at it; read or Reset it
// on the same thread between operations.
struct LinkTraffic {
  std::vector<double> bytes;
  std::vector<int64_t> transfers;
  std::vector<double> seconds;
  // Zeroes the counters for a world of `world_size` ranks.
  void Reset(int world_size);
};

// What a communicator charges transfers to. `links` and `clock` are non-owning and must outlive
// every communicator that uses them; `links` is indexed by WORLD rank.
struct Emulation {
  const LinkMatrix* links = nullptr;
  VirtualClock* clock = nullptr;
  // Charged bytes = real bytes * payload_scale. 1 in real runs; tests and studies may move a small
  // payload while charging the size of a large one (the charged count is what the clock sees).
  double payload_scale = 1.0;
  // The rank's current optimizer step, written by the rank's training loop (non-owning; must
  // outlive the communicator). Set: transfers are charged LinkAt(src, dst, *step) so that link
  // rate schedules apply; nullptr: the nominal links.
  const std::atomic<int64_t>* step = nullptr;
  // Optional (non-owning, must outlive the communicator): every charged transfer is counted here
  // (sized to the world by Reset before the first transfer).
  LinkTraffic* traffic = nullptr;
  bool enabled() const { return links != nullptr && clock != nullptr; }
};

// Alpha-beta times of the ring algorithms on a ring of `ring_links` (link i goes from the i-th
// member to the next), each step bounded by its slowest link, for S = `bytes` total.
// All-reduce: 2(n-1) steps of S/n; reduce-scatter and all-gather: (n-1) steps of S/n.
Seconds RingStepTime(const std::vector<LinkModel>& ring_links, Bytes step_bytes);
Seconds RingAllReduceTime(const std::vector<LinkModel>& ring_links, Bytes bytes);
Seconds RingReduceScatterTime(const std::vector<LinkModel>& ring_links, Bytes bytes);
Seconds RingAllGatherTime(const std::vector<LinkModel>& ring_links, Bytes bytes);

}  // namespace motley::comm
