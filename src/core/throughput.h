// Tokens per second: the one division of the tokens a run processed by the seconds they took,
// shared by the trainer's step lines and summaries, the predictor, `motley simulate`'s JSON, the
// planner's candidates, the straggler loop and the run reports. A time that is not positive
// (nothing measured, an empty step) has no rate: 0.
#pragma once

#include <cstdint>

#include "core/units.h"

namespace motley {

inline double TokensPerSecond(double tokens, Seconds seconds) {
  return seconds > 0 ? tokens / seconds : 0.0;
}
inline double TokensPerSecond(int64_t tokens, Seconds seconds) {
  return TokensPerSecond(static_cast<double>(tokens), seconds);
}

}  // namespace motley
