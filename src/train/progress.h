// Progress display of a training run. On a terminal: one line rewritten in place with '\r' (step,
// bar, loss, tokens/s, ETA). Otherwise (a pipe, a log file): a plain line every `every` steps and
// on the last step, so logs stay readable. Validation results and other notes print as their own
// lines in both modes.
// Does not own `out`; thread-compatible (the training loop's thread only).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "train/metrics.h"

namespace motley::train {

class ProgressReporter {
 public:
  ProgressReporter(std::FILE* out, bool interactive, int64_t total_steps, int64_t every);

  // True when `f` is a terminal (isatty on its descriptor).
  static bool IsTerminal(std::FILE* f);

  // After each step; elapsed_s is the wall time since training started (for the ETA).
  void Update(const StepMetrics& m, double elapsed_s);
  // A line of its own (e.g. "step 100: val_loss 2.1"), clearing the bar first on a terminal.
  void Note(const std::string& line);
  // Ends the bar's line on a terminal; a no-op otherwise. Idempotent.
  void Finish();

  // "1:02:03", "4:05" or "7s" style duration for the ETA.
  static std::string FormatDuration(double seconds);

 private:
  std::FILE* out_;
  bool interactive_;
  int64_t total_steps_;
  int64_t every_;
  bool bar_open_ = false;  // a '\r' line is on screen without its newline
};

}  // namespace motley::train
