#pragma once
// The per-step figures of training (loss, gradient norm, step time), kept on the device between
// log steps and read on the host all at once, so that a step needs no host sync (docs/strategy-plugins.md;
// torchtitan reads its loss only at log steps too).
//
// Step time: on the CPU, the host clock (everything is synchronous). On CUDA, CUDA events around
// each step on the compute stream, read when the figures are; or, with `[train] sync_timing`, a
// device synchronize at the end of every step and the host clock.

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include <c10/core/Event.h>
#include <torch/types.h>

#include "strata/comm.hpp"

namespace strata {

class StepStats {
 public:
  /// The figures of one step, on the host.
  struct Row {
    std::int64_t step = 0;   ///< 1-based
    double loss = 0;         ///< mean over micro-batches and ranks
    double grad_norm = 0;    ///< global, before clipping (NaN when not computed)
    double time_s = 0;       ///< the step's duration
    bool has_grad_norm = true;  ///< false: the step computed no norm (Strategy::kNormNotNeeded)
  };

  StepStats(torch::Device device, Comm& comm, bool sync_timing);
  /// Marks the start of a step.
  void begin_step();
  /// Marks its end: `loss` (this rank's mean over its micro-batches) and `norm` are device scalars
  /// (`norm` undefined when the step computed none).
  void end_step(std::int64_t step, const torch::Tensor& loss, const torch::Tensor& norm);
  /// Every step recorded since the last read, on the host: one device-to-host copy (the one host
  /// sync), after averaging the losses over the ranks (a collective: every rank reads at the same
  /// steps). Empty when nothing was recorded.
  std::vector<Row> read();

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::int64_t step = 0;
    torch::Tensor loss;
    torch::Tensor norm;
    bool has_norm = true;
    double host_time_s = 0;                // CPU and sync_timing
    std::optional<c10::Event> start, end;  // CUDA events
  };
  torch::Device device_;
  Comm& comm_;
  bool events_;  // time with CUDA events
  bool sync_;    // synchronize the device at the end of each step
  Clock::time_point started_{};
  std::optional<c10::Event> start_event_;
  std::vector<Pending> pending_;
  torch::Tensor no_norm_;  // NaN on the device: the norm of steps that computed none
};

}  // namespace strata
