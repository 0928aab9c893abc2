#pragma once
// The memory figures of one run (summary.json's `memory`, TensorBoard's memory/*), measured, never
// computed: the model state the strategy holds, the peaks of the process (RSS or the caching
// allocator's reserved bytes), of live tensors during setup and training, and on a GPU the device
// memory in use as the driver reports it. Each rank measures its own; the run reports the maximum
// over ranks.

#include <cstdint>
#include <optional>

#include <c10/core/Device.h>

#include "io/json.hpp"
#include "strata/comm.hpp"
#include "strata/strategy.hpp"

namespace strata {

namespace tb {
class EventWriter;
}

class RunMemory {
 public:
  explicit RunMemory(c10::Device device) : device_(device) {}

  /// After setup: the live-tensor peak of setup; then a new peak window for the training steps.
  void end_setup();
  /// At a log step: the strategy's model state, the peaks so far and the driver's used memory
  /// (this rank's), as memory/* scalars at `step`.
  void log(const Strategy& strategy, tb::EventWriter& events, std::int64_t step);
  /// After the last step (before evaluation, so that the training peak is measured, not
  /// evaluation's): every figure, the maximum over the ranks of `comm` (one all-reduce on its
  /// device, booked to evaluation).
  void measure(const Strategy& strategy, Comm& comm);
  /// When the run fails: this rank's peaks as they are.
  void measure_failed();
  /// Fills summary.json's `memory` object.
  void write(Json& memory) const;

 private:
  void sample_device_used();

  c10::Device device_;
  ModelStateBytes model_state_{};
  std::int64_t peak_bytes_ = 0;                    // RSS on the CPU, reserved bytes on CUDA
  std::int64_t peak_tensor_bytes_ = 0;             // live tensor bytes during training steps
  std::int64_t peak_setup_bytes_ = 0;              // live tensor bytes during setup
  std::optional<std::int64_t> device_used_bytes_;  // the driver's used device memory (GPU only)
};

}  // namespace strata
