#pragma once
// [train] trace_steps = [first, last] (a debug option): each rank records a trace of those steps
// with LibTorch's profiler (Kineto) and writes it as RUN_DIR/trace/rank_<R>.pt.trace.json in
// Chrome's trace format (Perfetto, chrome://tracing). It holds the CPU ops of the training thread
// and of autograd's threads, the collectives c10d records, Strata's own scopes (the step, each
// micro-batch, each unit's forward, the optimizer) and, on a GPU, the kernels and copies on their
// streams, which is where the overlap of communication and computation shows. The profiler slows
// the traced steps: the loop leaves them out of the step-time medians.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "io/json.hpp"

namespace strata {

class StepTrace {
 public:
  /// Traces steps `steps` = {first, last} (1-based; empty: none) of this rank, from the first one
  /// after `start_step` (a resumed run traces what is left of the range).
  StepTrace(std::vector<std::int64_t> steps, std::int64_t start_step, c10::Device device, std::filesystem::path run_dir,
            int rank);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  /// Before step `step1` (1-based), on the training thread: starts the profiler at the first traced step.
  void before_step(std::int64_t step1);
  /// After step `step1`: at the last traced step, waits for the device, stops the profiler and
  /// writes the trace. Returns a line for the log then, else "".
  std::string after_step(std::int64_t step1);
  /// Whether step `step1` ran under the profiler (it did unless the profiler could not start).
  bool traced(std::int64_t step1) const noexcept {
    return first_ > 0 && step1 >= first_ && step1 <= last_ && (active_ || written_);
  }
  /// summary.json's "trace": the steps and this rank's file; null without a trace.
  Json describe() const;

 private:
  std::int64_t first_ = 0, last_ = 0;
  c10::Device device_;
  std::filesystem::path file_;
  bool active_ = false;
  bool written_ = false;
  std::string error_;  // why the profiler did not start
};

}  // namespace strata
