#pragma once
// Where the time of a training step goes (summary.json's time_breakdown_s, TensorBoard's
// perf/time_*): data (fetching micro-batches, counting their targets), compute (forward and
// backward), optimizer (gradient norm, clipping, the optimizer step, parameter updates) and
// comm_wait, the exposed communication: time the step spent blocked in collectives (issuing them
// and waiting for them), taken out of the phase it happened in. Communication that overlapped
// computation costs nothing here, which is the point: a strategy whose step is slower shows
// whether it waits on the network or computes more.
//
// Measured on the host clock. On the CPU every phase is synchronous, so the figures are exact.
// On CUDA the host runs ahead of the device, so the breakdown is measured only with [train]
// sync_timing, which synchronizes the device at each phase boundary (slower steps, true figures);
// without it the breakdown is reported as unavailable rather than wrong.

#include <array>
#include <chrono>
#include <cstdint>

#include <torch/types.h>

#include "strata/comm.hpp"

namespace strata {

class StepBreakdown {
 public:
  enum Phase { kData = 0, kCompute = 1, kOptimizer = 2 };
  /// Seconds per step, averaged over the steps counted.
  struct Seconds {
    double data = 0, compute = 0, comm_wait = 0, optimizer = 0;
  };

  StepBreakdown(Comm& comm, torch::Device device, bool sync_timing);
  /// Whether figures are measured (CPU, or CUDA with sync_timing).
  bool available() const noexcept { return enabled_; }
  /// Starts timing `phase` (phases do not nest).
  void begin(Phase phase);
  /// Ends the phase begun last.
  void end();
  /// Counts one step.
  void end_step() { ++steps_; }
  /// The mean over the steps since the last call / since the start.
  Seconds take_interval();
  Seconds total() const;

 private:
  using Clock = std::chrono::steady_clock;
  void sync() const;
  double comm_seconds() const { return comm_.counters(CommPhase::kTrain).time_s; }

  Comm& comm_;
  torch::Device device_;
  bool enabled_;
  bool sync_;
  Phase phase_ = kData;
  Clock::time_point started_{};
  double comm_at_start_ = 0;
  std::array<double, 4> sums_{};      // data, compute, comm_wait, optimizer: since the start
  std::array<double, 4> interval_{};  // likewise, since the last take_interval()
  std::int64_t steps_ = 0, interval_from_ = 0;
};

}  // namespace strata
