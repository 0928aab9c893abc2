#pragma once
// Where the time of a training step goes (summary.json's time_breakdown_s, TensorBoard's
// perf/time_*): data (fetching micro-batches, counting their targets), compute (forward and
// backward), optimizer (gradient norm, clipping, the optimizer step, parameter updates) and
// comm_wait, the exposed communication: time the step stood waiting for collectives, taken out of
// the phase it happened in. Communication that overlapped computation costs nothing here, which is
// the point: a strategy whose step is slower shows whether it waits on the network or computes more.
//
// How it is measured (clock()):
// - "host clock" (the CPU): every phase is synchronous; comm_wait is the host time spent issuing
//   collectives and blocked in their waits (Comm::counters().time_s).
// - "cuda events" (CUDA): the host runs ahead of the device, so each phase is timed by events on
//   the current stream at its start and end (device time: the data phase is what the stream
//   waits for the batch's copy to the device, which the loader's thread makes on a stream of its
//   own ahead of time: near zero when the copy kept up), and comm_wait by events around every
//   wait for a collective on the stream that waited (comm/stream_waits.hpp: NCCL's waits stall the
//   stream, not the host). Where the host cannot
//   keep the device busy, the device idles between phases, and the phases add up to less than the
//   step time. The events are read at log steps (take_interval(), total()), where the trainer reads
//   its figures anyway: the step itself never waits for the device.

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include <c10/core/Event.h>
#include <torch/types.h>

#include "comm/stream_waits.hpp"
#include "strata/comm.hpp"

namespace strata {

class StepBreakdown {
 public:
  enum Phase { kData = 0, kCompute = 1, kOptimizer = 2 };
  /// Seconds per step, averaged over the steps counted.
  struct Seconds {
    double data = 0, compute = 0, comm_wait = 0, optimizer = 0;
  };

  StepBreakdown(Comm& comm, torch::Device device);
  ~StepBreakdown();
  StepBreakdown(const StepBreakdown&) = delete;
  StepBreakdown& operator=(const StepBreakdown&) = delete;

  /// "host clock" or "cuda events": what the figures are measured with.
  const char* clock() const noexcept { return events_ ? "cuda events" : "host clock"; }
  /// Starts timing `phase` (phases do not nest).
  void begin(Phase phase);
  /// Ends the phase begun last.
  void end();
  /// Counts one step (and books the phases the device has finished, without waiting for it).
  void end_step();
  /// The mean over the steps since the last call. With CUDA events, waits for the device to reach
  /// the last phase's end (call at log steps, not in the step).
  Seconds take_interval();
  /// The mean since the start. `wait_for_device` false (a failed run, whose device may never reach
  /// the end of a hung collective): only the phases the device has finished count.
  Seconds total(bool wait_for_device);
  /// Each phase's median over the steps after the first `skip` (the steps steady_step_time_s is the
  /// median of), so that the phases describe the steady step rather than a mean that the first
  /// steps' allocations and cold caches inflate. Settles as total() does.
  Seconds steady(std::int64_t skip, bool wait_for_device);

 private:
  using Clock = std::chrono::steady_clock;
  /// A phase timed with events, until the device has passed its end.
  struct Pending {
    Phase phase;
    std::int64_t step;  ///< the step it belongs to
    c10::Event start, end;
    std::vector<StreamWaits::Pair> waits;  ///< the waits for collectives within it
  };
  double comm_seconds() const { return comm_.counters(CommPhase::kTrain).time_s; }
  void add(Phase phase, std::int64_t step, double elapsed, double blocked);
  /// Books the pending phases whose events have completed; `block`: all of them, waiting.
  void settle(bool block);

  Comm& comm_;
  torch::Device device_;
  bool events_;
  Phase phase_ = kData;
  Clock::time_point started_{};
  double comm_at_start_ = 0;
  std::optional<c10::Event> start_event_;
  std::deque<Pending> pending_;
  std::array<double, 4> sums_{};      // data, compute, comm_wait, optimizer: since the start
  std::array<double, 4> interval_{};  // likewise, since the last take_interval()
  std::vector<std::array<double, 4>> per_step_;  // likewise, step by step
  std::int64_t steps_ = 0, interval_from_ = 0;
};

}  // namespace strata
