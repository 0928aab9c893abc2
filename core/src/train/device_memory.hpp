#pragma once
// Peak memory this rank's process holds: the CUDA caching allocator's peak reserved bytes on a GPU
// (what it took from the driver, cached blocks included), the process's peak resident set size on
// the CPU (which includes the framework and the data set). memory.peak_bytes of summary.json; the
// live tensor bytes are train/tensor_memory.hpp's.

#include <cstdint>
#include <string>

#include <c10/core/Device.h>

namespace strata {

/// Starts a new peak-measurement window on `device` (no-op on the CPU, whose peak RSS cannot be reset).
void reset_peak_memory(const c10::Device& device);
/// Peak bytes since the last reset: CUDA reserved bytes, or the process's max RSS on the CPU.
std::int64_t peak_memory_bytes(const c10::Device& device);
/// What peak_memory_bytes measures on `device`, for the summary ("cuda_reserved" or "process_max_rss").
std::string peak_memory_source(const c10::Device& device);

}  // namespace strata
