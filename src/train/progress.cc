// See progress.h.
#include "train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

namespace motley::train {
namespace {

constexpr int kBarWidth = 24;

std::string FormatRate(double tokens_per_s) {
  if (tokens_per_s >= 1e6) return fmt::format("{:.2f}M", tokens_per_s / 1e6);
  if (tokens_per_s >= 1e3) return fmt::format("{:.1f}k", tokens_per_s / 1e3);
  return fmt::format("{:.0f}", tokens_per_s);
}

}  // namespace

ProgressReporter::ProgressReporter(std::FILE* out, bool interactive, int64_t total_steps,
                                   int64_t every)
    : out_(out), interactive_(interactive), total_steps_(total_steps), every_(every) {
  MOTLEY_CHECK(out != nullptr, "ProgressReporter needs an output");
  MOTLEY_CHECK(total_steps >= 0 && every >= 1, "bad progress settings");
}

bool ProgressReporter::IsTerminal(std::FILE* f) {
  return ::isatty(::fileno(f)) == 1;
}

std::string ProgressReporter::FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}:{:02}", s / 60, s % 60);
  return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
}

void ProgressReporter::Update(const StepMetrics& m, double elapsed_s) {
  const double per_step = m.step > 0 ? elapsed_s / static_cast<double>(m.step) : 0.0;
  const double eta_s = per_step * static_cast<double>(std::max<int64_t>(total_steps_ - m.step, 0));
  if (interactive_) {
    const double frac =
        total_steps_ > 0 ? static_cast<double>(m.step) / static_cast<double>(total_steps_) : 1.0;
    const int filled = std::clamp(static_cast<int>(frac * kBarWidth), 0, kBarWidth);
    const std::string bar = std::string(static_cast<size_t>(filled), '#') +
                            std::string(static_cast<size_t>(kBarWidth - filled), '.');
    fmt::print(out_, "\rstep {}/{} [{}] loss {:.4f} | {} tok/s | ETA {}\x1b[K", m.step,
               total_steps_, bar, m.loss, FormatRate(m.tokens_per_s), FormatDuration(eta_s));
    std::fflush(out_);
    bar_open_ = true;
    return;
  }
  if (m.step % every_ != 0 && m.step != total_steps_ && m.step != 1) return;
  fmt::print(out_, "step {}/{} loss {:.4f} lr {:.3e} grad_norm {:.3f} tok/s {:.0f} ETA {}\n",
             m.step, total_steps_, m.loss, m.lr, m.grad_norm, m.tokens_per_s,
             FormatDuration(eta_s));
  std::fflush(out_);
}

void ProgressReporter::Note(const std::string& line) {
  if (bar_open_) {
    fmt::print(out_, "\r\x1b[K");
    bar_open_ = false;
  }
  fmt::print(out_, "{}\n", line);
  std::fflush(out_);
}

void ProgressReporter::Finish() {
  if (bar_open_) {
    fmt::print(out_, "\n");
    std::fflush(out_);
    bar_open_ = false;
  }
}

}  // namespace motley::train
