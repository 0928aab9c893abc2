#pragma once
// Exposed communication on a device whose collectives are stream-ordered (NCCL on CUDA): the time
// the waiting stream stood still for a collective. CommWork::wait() on NCCL returns to the host at
// once and makes the current stream wait for the collective's end event, so a host clock around it
// reads about 0 and the stall shows up later as "compute". Instead, a pair of timing events is
// recorded on the current stream around every wait (before: the stream reaches the wait; after: it
// has passed it); their elapsed time is exactly the stall. A host_wait() gets the same pair: the
// stream idles from when it drains up to the work queued after the host is released.
//
// The recorder is off (and costs one atomic load per wait) unless the step breakdown turns it on
// for a CUDA device. It is process-wide because waits happen wherever the strategies call them
// (the autograd thread's gradient hooks included) and one process runs one job; calls from any
// thread are safe. The events are read by the step breakdown (train/step_breakdown.cpp) at log
// steps, never in the step itself.

#include <atomic>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/Event.h>

namespace strata {

/// A timing event (CUDA: with timing, which PyTorch's default flag disables) recorded now on the
/// calling thread's current stream of `device`.
c10::Event record_timing_event(c10::Device device);

class StreamWaits {
 public:
  /// The pair of events around one wait, on the stream that waited.
  struct Pair {
    c10::Event before;
    c10::Event after;
  };

  static StreamWaits& instance();

  /// Starts recording waits on `device` (a CUDA device: its current stream at each wait).
  void enable(c10::Device device);
  void disable();
  bool enabled() const noexcept { return enabled_.load(std::memory_order_acquire); }

  /// The event before a wait (nullopt when off); pass it to after_wait() once the wait returned.
  std::optional<c10::Event> before_wait();
  void after_wait(std::optional<c10::Event> before);

  /// The pairs recorded since the last call, in the order they were recorded.
  std::vector<Pair> take();

 private:
  StreamWaits() = default;

  std::atomic<bool> enabled_{false};
  c10::Device device_{c10::DeviceType::CPU};
  std::mutex mutex_;
  std::vector<Pair> pairs_;
};

}  // namespace strata
