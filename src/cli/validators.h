// Range checks of command-line numbers (issue 17), as CLI11 validators, so that an out-of-range
// value is a usage error naming the option (exit code 2, docs/exit-codes.md) before any command
// runs. CLI11's own Range and NonNegativeNumber let NaN through (every comparison with NaN is
// false) and print integer bounds as "1.000000"; these do neither. The bounds come from
// spec/limits.h where a spec field has the same meaning.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

namespace motley::cli {

// A finite number in [lo, hi].
inline CLI::Validator FiniteRange(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& input) -> std::string {
        double value = 0;
        const char* end = input.data() + input.size();
        const auto [ptr, ec] = std::from_chars(input.data(), end, value);
        if (ec != std::errc() || ptr != end || !std::isfinite(value)) {
          return fmt::format("expected a finite number, got '{}'", input);
        }
        if (value < lo || value > hi) {
          return fmt::format("must be in [{:g}, {:g}], got {}", lo, hi, input);
        }
        return "";
      },
      fmt::format("NUMBER in [{:g}, {:g}]", lo, hi));
}

// An integer in [lo, hi] (no sign or digits beyond int64).
inline CLI::Validator IntRange(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& input) -> std::string {
        int64_t value = 0;
        const char* end = input.data() + input.size();
        const auto [ptr, ec] = std::from_chars(input.data(), end, value);
        if (ec == std::errc::result_out_of_range) {
          return fmt::format("must be in [{}, {}], got {}", lo, hi, input);
        }
        if (ec != std::errc() || ptr != end)
          return fmt::format("expected an integer, got '{}'", input);
        if (value < lo || value > hi)
          return fmt::format("must be in [{}, {}], got {}", lo, hi, input);
        return "";
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

}  // namespace motley::cli
