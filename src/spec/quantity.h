// Human-readable quantities in spec files: "312 TFLOPS", "80 GiB", "2 TB/s", "200 Gbit/s", "5 us".
// A bare number is taken in the base unit (FLOP/s, bytes, bytes/s, seconds). Pure functions;
// thread-safe.
#pragma once

#include <string_view>

#include "core/status.h"

namespace motley::spec {

enum class QuantityKind {
  kFlopsPerSecond,   // FLOPS, FLOP/s; prefixes k M G T P (decimal)
  kBytes,            // B, kB MB GB TB (decimal), KiB MiB GiB TiB (binary)
  kBytesPerSecond,   // B/s, kB/s .. TB/s, KiB/s .. GiB/s, bit/s, Mbit/s Gbit/s Tbit/s, Gbps
  kSeconds,          // s, ms, us (or µs), ns
};

// Name of the kind for error messages ("a byte size", "a bandwidth", ...).
std::string_view QuantityKindName(QuantityKind kind);

// Parses `text` as a quantity of `kind` and returns it in the base unit. Accepts an optional space
// between number and unit; units are case-sensitive where it matters (Gbit vs GB). Negative values
// parse (range checks are the caller's); errors say what was expected, e.g.
// "expected a bandwidth such as '25 GB/s' or '200 Gbit/s', got '3 GiB'".
Result<double> ParseQuantity(std::string_view text, QuantityKind kind);

}  // namespace motley::spec
