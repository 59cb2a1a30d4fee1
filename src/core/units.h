// Unit-carrying aliases for plain doubles, so that signatures say what a number is
// (astra-sim style). Conversions are explicit constants.
#pragma once

#include <cstdint>

namespace motley {

using Seconds = double;
using Bytes = double;            // may be fractional in cost models
using BytesPerSecond = double;
using FlopsPerSecond = double;
using Flops = double;

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kGB = 1e9;
inline constexpr double kTera = 1e12;

}  // namespace motley
