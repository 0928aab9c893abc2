#include "train/step_breakdown.hpp"

#include <algorithm>
#include <utility>

#include <torch/cuda.h>

namespace strata {

StepBreakdown::StepBreakdown(Comm& comm, torch::Device device, bool sync_timing)
    : comm_(comm), device_(device), enabled_(!device.is_cuda() || sync_timing), sync_(device.is_cuda() && sync_timing) {}

void StepBreakdown::sync() const {
  if (sync_) torch::cuda::synchronize(device_.index());
}

void StepBreakdown::begin(Phase phase) {
  if (!enabled_) return;
  sync();
  phase_ = phase;
  comm_at_start_ = comm_seconds();
  started_ = Clock::now();
}

void StepBreakdown::end() {
  if (!enabled_) return;
  sync();
  const double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
  const double blocked = comm_seconds() - comm_at_start_;
  const std::array<std::pair<int, double>, 2> parts{{{phase_ == kData ? 0 : phase_ == kCompute ? 1 : 3,
                                                       std::max(0.0, elapsed - blocked)},
                                                      {2, blocked}}};
  for (const auto& [i, seconds] : parts) {
    sums_[static_cast<std::size_t>(i)] += seconds;
    interval_[static_cast<std::size_t>(i)] += seconds;
  }
}

namespace {
StepBreakdown::Seconds mean(const std::array<double, 4>& sums, std::int64_t steps) {
  const double n = steps > 0 ? static_cast<double>(steps) : 1.0;
  return {sums[0] / n, sums[1] / n, sums[2] / n, sums[3] / n};
}
}  // namespace

StepBreakdown::Seconds StepBreakdown::take_interval() {
  const auto out = mean(interval_, steps_ - interval_from_);
  interval_ = {};
  interval_from_ = steps_;
  return out;
}

StepBreakdown::Seconds StepBreakdown::total() const { return mean(sums_, steps_); }

}  // namespace strata
