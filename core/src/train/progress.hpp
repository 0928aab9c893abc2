#pragma once
// The progress display of the training loop: a self-rewriting line on a terminal, plain log lines
// otherwise (rank 0 only).

#include <chrono>
#include <cstdint>
#include <string>

#include "strata/logger.hpp"

namespace strata {

/// "m:ss" or "h:mm:ss".
std::string format_duration(double seconds);

class Progress {
 public:
  Progress(const Logger& log, std::int64_t total);
  bool tty() const { return tty_; }
  /// The line of step `step` (drawn at most every 100 ms on a terminal; logged at log steps
  /// otherwise). `loss` is the last one read, at step `loss_step` (a log step: reading it between
  /// them would sync with the device and every rank), said so when it is not this step's.
  void update(std::int64_t step, double loss, std::int64_t loss_step, double lr, double samples_per_s, double eta_s,
              bool log_step);
  /// Prints a full line without disturbing the progress line.
  void line(const std::string& text);
  /// Ends the progress line.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  const Logger& log_;
  std::int64_t total_;
  bool tty_;
  Clock::time_point last_draw_{};
};

}  // namespace strata
