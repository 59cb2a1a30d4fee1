// Progress display of a training run, one format for the single-device loop and the parallel
// loop. On a terminal: one line redrawn in place with '\r' every step:
//   step 12/80 [####............] loss 3.1191 | 1.2k tok/s | 312 tok/s virtual | ETA 0:20
// Otherwise (a pipe, a log file): a plain line on the first step, every `every` steps, on the last
// step and on a flagged step (skipped, loss spike), so logs stay readable:
//   step 12/80 | loss 3.1191 | lr 1.96e-03 | norm 1.042 | 1.2k tok/s | 312 tok/s virtual |
//   MFU 43.83% | ETA 0:20
// "tok/s" is wall-clock throughput; an emulated run on the virtual clock also shows its emulated
// rate ("virtual"). The ETA is the wall time per step so far times the steps left. Validation
// results, checkpoints and other notes print as lines of their own in both modes (Note).
// Does not own `out`; thread-compatible (the thread that reports steps only).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace motley::train {

// One step as the progress line shows it.
struct ProgressStep {
  int64_t step = 0;
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  int64_t tokens = 0;                           // tokens in the step's global batch
  double wall_step_s = 0.0;                     // the step's wall time
  std::optional<double> emulated_tokens_per_s;  // on the virtual clock of an emulated run
  std::optional<double> mfu;                    // model FLOPs utilisation, when known
  std::string flag;  // e.g. "SKIPPED: non-finite loss or gradient norm"; forces a plain line
};

class ProgressReporter {
 public:
  // first_step: the step this call starts at (1, or the resumed checkpoint's step + 1).
  ProgressReporter(std::FILE* out, bool interactive, int64_t first_step, int64_t total_steps,
                   int64_t every);

  // True when `f` is a terminal (isatty on its descriptor).
  static bool IsTerminal(std::FILE* f);

  // After each step; elapsed_s is the wall time since this call's first step began (ETA).
  void Update(const ProgressStep& s, double elapsed_s);
  // A line of its own (e.g. "step 100: val_loss 2.1"), clearing the bar first on a terminal.
  void Note(const std::string& line);
  // Ends the bar's line on a terminal; a no-op otherwise. Idempotent.
  void Finish();

  // "1:02:03", "4:05" or "7s" style duration for the ETA; "?" when unknown.
  static std::string FormatDuration(double seconds);
  // "950", "1.2k", "3.40M" tokens/s.
  static std::string FormatRate(double tokens_per_s);

 private:
  std::FILE* out_;
  bool interactive_;
  int64_t first_step_;
  int64_t total_steps_;
  int64_t every_;
  bool bar_open_ = false;  // a '\r' line is on screen without its newline
};

// The plain-line interval when none is given: total_steps / 20, at least 1.
int64_t DefaultLogInterval(int64_t total_steps);

}  // namespace motley::train
