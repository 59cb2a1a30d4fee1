// RankClock: the time source of one rank's measurements (StageTimes, trace events, comm seconds).
// On an emulated cluster it reads the rank's VirtualClock (core/clock.h), the clock the emulated
// backend charges compute to and the communicator charges transfers to, so every reported time is
// emulated time (exact on a kVirtual clock, paced on a kWall clock). Without one it reads the
// steady clock, in seconds since `origin` (the same origin on every rank aligns their traces).
//
// Value type holding a non-owning pointer: the VirtualClock must outlive every copy. Thread
// safety: as the VirtualClock (one rank's thread); the steady-clock form is thread-safe.
#pragma once

#include <chrono>

#include "core/clock.h"
#include "core/units.h"

namespace motley::parallel {

class RankClock {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;

  // Steady clock from now.
  RankClock() : origin_(std::chrono::steady_clock::now()) {}
  // Steady clock from `origin`.
  explicit RankClock(SteadyTime origin) : origin_(origin) {}
  // The rank's emulated clock (not owned; nullptr: steady clock from now).
  explicit RankClock(const VirtualClock* clock)
      : clock_(clock), origin_(std::chrono::steady_clock::now()) {}

  // Seconds: the virtual clock's now(), or steady seconds since the origin.
  Seconds Now() const {
    if (clock_ != nullptr) return clock_->now();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }
  Seconds Since(Seconds start) const { return Now() - start; }
  bool is_virtual() const { return clock_ != nullptr; }

 private:
  const VirtualClock* clock_ = nullptr;
  SteadyTime origin_;
};

}  // namespace motley::parallel
