// See format_units.h.
#include "core/format_units.h"

#include <cmath>

#include <fmt/core.h>

#include "core/units.h"

namespace motley {

std::string FormatBytes(double bytes) {
  if (!(bytes >= 0.0) || !std::isfinite(bytes)) return "?";
  constexpr double kMiB = 1024.0 * 1024.0;
  if (bytes < 1024.0) return fmt::format("{:.0f} B", bytes);
  if (bytes < kMiB) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < kGiB) return fmt::format("{:.1f} MiB", bytes / kMiB);
  return fmt::format("{:.2f} GiB", bytes / kGiB);
}

std::string FormatSeconds(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  if (std::fabs(seconds) < 1e-3) return fmt::format("{:.1f} us", seconds * 1e6);
  if (std::fabs(seconds) < 1.0) return fmt::format("{:.2f} ms", seconds * 1e3);
  return fmt::format("{:.3f} s", seconds);
}

}  // namespace motley
