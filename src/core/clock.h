// VirtualClock: one rank's emulated time, shared by whoever charges that rank time (the emulated
// backend for compute, the communicator for transfers). docs/architecture.md §6.
//
// Two modes:
// - kVirtual: nothing sleeps; now() is the sum of what was charged (exact and repeatable).
// - kWall: the same bookkeeping, and every advance also sleeps until origin + now() on the steady
//   clock. Deadlines are absolute, so a sleep that overshoots (~70-80 us on these machines) is
//   carried forward: the next deadline is not moved, the next sleep is simply shorter.
// Ownership: the rank's driver owns the clock; users hold a non-owning pointer that must not
// outlive it. Thread safety: thread-compatible (one rank thread advances its own clock).
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/check.h"
#include "core/units.h"

namespace motley {

class VirtualClock {
 public:
  enum class Mode { kVirtual, kWall };
  using SteadyTime = std::chrono::steady_clock::time_point;

  explicit VirtualClock(Mode mode = Mode::kVirtual,
                        SteadyTime origin = std::chrono::steady_clock::now())
      : mode_(mode), origin_(origin) {}

  Mode mode() const { return mode_; }
  Seconds now() const { return now_s_; }
  SteadyTime origin() const { return origin_; }

  // Charges `dt` seconds (compute, a local copy...): now += dt, then paces in kWall mode.
  void Advance(Seconds dt) {
    MOTLEY_CHECK(dt >= 0.0, "VirtualClock::Advance with a negative duration");
    now_s_ += dt;
    Pace();
  }
  // Moves the clock to max(now, t) (a message arriving at t), then paces in kWall mode.
  void AdvanceTo(Seconds t) {
    now_s_ = std::max(now_s_, t);
    Pace();
  }
  // Seconds actually elapsed on the steady clock since the origin (for reports, kWall mode).
  Seconds wall_elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }

 private:
  void Pace() const {
    if (mode_ != Mode::kWall) return;
    const auto deadline =
        origin_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(now_s_));
    if (std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_until(deadline);
  }

  Mode mode_;
  SteadyTime origin_;
  Seconds now_s_ = 0.0;
};

}  // namespace motley
