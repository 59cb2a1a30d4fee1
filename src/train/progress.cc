// See progress.h.
#include "train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

#include "core/check.h"
#include "core/throughput.h"

namespace motley::train {
namespace {

constexpr int kBarWidth = 20;

}  // namespace

int64_t DefaultLogInterval(int64_t total_steps) {
  return std::max<int64_t>(1, total_steps / 20);
}

ProgressReporter::ProgressReporter(std::FILE* out, bool interactive, int64_t first_step,
                                   int64_t total_steps, int64_t every)
    : out_(out),
      interactive_(interactive),
      first_step_(first_step),
      total_steps_(total_steps),
      every_(every) {
  MOTLEY_CHECK(out != nullptr, "ProgressReporter needs an output");
  MOTLEY_CHECK(total_steps >= 0 && every >= 1 && first_step >= 1, "bad progress settings");
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

std::string ProgressReporter::FormatRate(double tokens_per_s) {
  if (!std::isfinite(tokens_per_s)) return "?";
  if (tokens_per_s >= 1e6) return fmt::format("{:.2f}M", tokens_per_s / 1e6);
  if (tokens_per_s >= 1e4) return fmt::format("{:.1f}k", tokens_per_s / 1e3);
  return fmt::format("{:.0f}", tokens_per_s);
}

void ProgressReporter::Update(const ProgressStep& s, double elapsed_s) {
  const int64_t done = s.step - first_step_ + 1;
  const double per_step = done > 0 ? elapsed_s / static_cast<double>(done) : 0.0;
  const double eta_s = per_step * static_cast<double>(std::max<int64_t>(total_steps_ - s.step, 0));
  const double wall_rate = TokensPerSecond(s.tokens, s.wall_step_s);
  std::string rates = fmt::format("{} tok/s", FormatRate(wall_rate));
  if (s.emulated_tokens_per_s) {
    rates += fmt::format(" | {} tok/s virtual", FormatRate(*s.emulated_tokens_per_s));
  }
  const std::string flag = s.flag.empty() ? "" : " | " + s.flag;
  if (interactive_ && s.flag.empty()) {
    const double frac =
        total_steps_ > 0 ? static_cast<double>(s.step) / static_cast<double>(total_steps_) : 1.0;
    const int filled = std::clamp(static_cast<int>(frac * kBarWidth), 0, kBarWidth);
    const std::string bar = std::string(static_cast<size_t>(filled), '#') +
                            std::string(static_cast<size_t>(kBarWidth - filled), '.');
    fmt::print(out_, "\rstep {}/{} [{}] loss {:.4f} | {} | ETA {}\x1b[K", s.step, total_steps_, bar,
               s.loss, rates, FormatDuration(eta_s));
    std::fflush(out_);
    bar_open_ = true;
    return;
  }
  if (!interactive_ && s.flag.empty() && s.step % every_ != 0 && s.step != total_steps_ &&
      s.step != first_step_) {
    return;
  }
  if (bar_open_) {
    fmt::print(out_, "\r\x1b[K");
    bar_open_ = false;
  }
  const std::string mfu = s.mfu ? fmt::format(" | MFU {:.2f}%", 100.0 * *s.mfu) : "";
  fmt::print(out_, "step {}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {}{} | ETA {}{}\n", s.step,
             total_steps_, s.loss, s.lr, s.grad_norm, rates, mfu, FormatDuration(eta_s), flag);
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
