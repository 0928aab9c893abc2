#pragma once
// Live and peak bytes of the tensors this process holds (docs/user-guide.md: measured, never computed).
// On the CPU through a counting wrapper around LibTorch's CPU allocator, installed by the host; on
// CUDA from the caching allocator's allocated-bytes statistics. Host-side data (the dataset and
// the batches it hands out) is left out on the CPU, as it never reaches a GPU's allocator, so the
// two devices report the same thing: what training holds on its device.

#include <cstdint>
#include <string>

#include <c10/core/Device.h>

namespace strata::tensor_memory {

/// Installs the counting CPU allocator (once per process; later calls do nothing). Tensors that
/// exist before keep their own deleter and are never counted.
void install();
/// Live tensor bytes on `device` now (CPU: counted allocations; CUDA: allocated bytes).
std::int64_t live_bytes(const c10::Device& device);
/// The most live tensor bytes on `device` since the last reset_peak() (or process start).
std::int64_t peak_bytes(const c10::Device& device);
/// Starts a new peak window: the peak becomes the live bytes now.
void reset_peak(const c10::Device& device);
/// What the figures measure on `device`: "cpu_counting_allocator" or "cuda_allocated".
std::string source(const c10::Device& device);

/// While an object of this type lives on a thread, that thread's CPU tensor allocations are not
/// counted (host-side data: the dataset, its batches before they are copied to the device).
class Untracked {
 public:
  Untracked();
  ~Untracked();
  Untracked(const Untracked&) = delete;
  Untracked& operator=(const Untracked&) = delete;
};

}  // namespace strata::tensor_memory
