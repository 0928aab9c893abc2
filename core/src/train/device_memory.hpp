#pragma once
// Peak memory this rank's process holds: the CUDA caching allocator's peak reserved bytes on a GPU
// (what it took from the driver, cached blocks included), the process's peak resident set size on
// the CPU (which includes the framework and the data set). memory.peak_bytes of summary.json; the
// live tensor bytes are train/tensor_memory.hpp's. On a GPU also the device memory in use as the
// driver sees it (memory.device_used_bytes), which includes what no allocator counts: the CUDA
// context, cuBLAS/cuDNN workspaces and NCCL's own buffers.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <c10/core/Device.h>

namespace strata {

/// Initializes CUDA's caching allocator when nothing has allocated on a GPU yet: its statistics
/// (peaks, resets) throw "Invalid device argument" before that (torch.cuda's _lazy_init).
void init_cuda_allocator();
/// Starts a new peak-measurement window on `device` (no-op on the CPU, whose peak RSS cannot be reset).
void reset_peak_memory(const c10::Device& device);
/// Peak bytes since the last reset: CUDA reserved bytes, or the process's max RSS on the CPU.
std::int64_t peak_memory_bytes(const c10::Device& device);
/// What peak_memory_bytes measures on `device`, for the summary ("cuda_reserved" or "process_max_rss").
std::string peak_memory_source(const c10::Device& device);
/// Bytes in use on the GPU `device` as the driver reports them (cudaMemGetInfo: total - free; every
/// process on the device counts), std::nullopt on the CPU.
std::optional<std::int64_t> device_used_bytes(const c10::Device& device);
/// Total memory of the GPU `device` (cudaGetDeviceProperties' totalGlobalMem: creates no CUDA
/// context, so the launcher can ask before its ranks start) and its name; std::nullopt on the CPU
/// or where the device cannot be queried.
std::optional<std::pair<std::int64_t, std::string>> device_total_bytes(const c10::Device& device);

}  // namespace strata
