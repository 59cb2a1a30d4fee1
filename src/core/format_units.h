// Human-readable quantities for command output and reports: memory in MiB below 1 GiB and in GiB
// above, durations in ms below a second. One place, so the planner's table, `motley predict` and
// the HTML reports print the same numbers the same way. Pure functions; thread-safe.
#pragma once

#include <string>

namespace motley {

// "0 B", "512 B", "64.0 MiB", "1.50 GiB" (binary units; negative or NaN input prints "?").
std::string FormatBytes(double bytes);
// "850.0 us", "12.34 ms", "1.234 s": microseconds below 1 ms, milliseconds below 1 s.
std::string FormatSeconds(double seconds);

}  // namespace motley
