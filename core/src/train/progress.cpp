#include "train/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

namespace strata {

std::string format_duration(double seconds) {
  auto s = static_cast<std::int64_t>(std::max(0.0, seconds) + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

namespace {
/// Whether to redraw one progress line (a person watching a terminal) rather than log lines.
/// STRATA_PROGRESS=bar|lines decides; "auto" (the default) draws only on a terminal whose TERM can
/// redraw, and not under mpirun, whose ranks write to a pty of its own even when the job's output
/// goes to a file.
bool draws_bar() {
  const char* choice = std::getenv("STRATA_PROGRESS");
  const std::string mode = choice != nullptr ? choice : "auto";
  if (mode == "bar") return true;
  if (mode == "lines") return false;
  const char* term = std::getenv("TERM");
  const bool terminal = isatty(STDOUT_FILENO) == 1 && term != nullptr && *term != '\0' && std::string(term) != "dumb";
  return terminal && std::getenv("OMPI_COMM_WORLD_RANK") == nullptr;
}
}  // namespace

Progress::Progress(const Logger& log, std::int64_t total) : log_(log), total_(total), tty_(draws_bar()) {}

void Progress::update(std::int64_t step, double loss, std::int64_t loss_step, double lr, double samples_per_s,
                      double eta_s, bool log_step) {
  if (log_.rank() != 0) return;
  const std::string at = loss_step > 0 && loss_step != step ? fmt::format(" (step {})", loss_step) : std::string();
  const std::string text = fmt::format("step {:>{}}/{}  loss {:.4f}{}  lr {:.2e}  {:.0f} samples/s  eta {}", step,
                                       std::to_string(total_).size(), total_, loss, at, lr, samples_per_s,
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
