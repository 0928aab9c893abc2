#include "train/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace strata {

std::string format_duration(double seconds) {
  auto s = static_cast<std::int64_t>(std::max(0.0, seconds) + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

Progress::Progress(const Logger& log, std::int64_t total)
    : log_(log), total_(total), tty_(isatty(STDOUT_FILENO) == 1) {}

void Progress::update(std::int64_t step, double loss, double lr, double samples_per_s, double eta_s, bool log_step) {
  if (log_.rank() != 0) return;
  const std::string text = fmt::format("step {:>{}}/{}  loss {:.4f}  lr {:.2e}  {:.0f} samples/s  eta {}", step,
                                       std::to_string(total_).size(), total_, loss, lr, samples_per_s,
                                       format_duration(eta_s));
  if (tty_) {
    const auto now = Clock::now();
    if (step != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::fprintf(stdout, "\r\033[K%s", text.c_str());
    std::fflush(stdout);
  } else if (log_step) {
    log_.info(text);
  }
}

void Progress::line(const std::string& text) {
  if (log_.rank() != 0) return;
  if (tty_) std::fprintf(stdout, "\r\033[K");
  log_.info(text);
}

void Progress::finish() {
  if (tty_ && log_.rank() == 0) std::fprintf(stdout, "\n");
}

}  // namespace strata
