// Internal to train/checkpoint: recognising checkpoint folder names ("step-" + digits, exactly).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace motley::train::internal {

// The step of a complete-checkpoint folder name "step-NNNNNNNN"; nullopt for anything else
// (including "step-N.tmp" and "step-N.old").
inline std::optional<int64_t> ParseCheckpointDirName(std::string_view name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) return {};
  int64_t step = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9' || step > (INT64_MAX - 9) / 10) return {};
    step = step * 10 + (c - '0');
  }
  return step;
}

}  // namespace motley::train::internal
