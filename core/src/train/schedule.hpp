#pragma once
// Learning-rate schedules: linear warmup, then constant or cosine decay to a floor.

#include <cmath>
#include <cstdint>
#include <string>

namespace strata {

struct LrSchedule {
  double peak = 1e-3;              ///< optimizer.lr
  std::int64_t total_steps = 1;    ///< train.steps
  std::int64_t warmup_steps = 0;   ///< linear ramp from peak/warmup to peak
  bool cosine = false;             ///< cosine decay after warmup, else constant
  double min_ratio = 0.0;          ///< cosine floor as a fraction of peak

  /// Learning rate of optimizer step `step` (0-based).
  double at(std::int64_t step) const {
    if (step < warmup_steps) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
    if (!cosine) return peak;
    const std::int64_t decay_steps = total_steps - warmup_steps;
    if (decay_steps <= 1) return peak;
    const double progress = static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - 1);
    const double floor = peak * min_ratio;
    return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
};

}  // namespace strata
