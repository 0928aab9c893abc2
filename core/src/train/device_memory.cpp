#include "train/device_memory.hpp"

#include <sys/resource.h>

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace strata {

void init_cuda_allocator() { at::globalContext().lazyInitDevice(c10::DeviceType::CUDA); }

void reset_peak_memory(const c10::Device& device) {
  if (!device.is_cuda()) return;
  init_cuda_allocator();
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

std::int64_t peak_memory_bytes(const c10::Device& device) {
  if (device.is_cuda()) {
    init_cuda_allocator();
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.reserved_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string peak_memory_source(const c10::Device& device) {
  return device.is_cuda() ? "cuda_reserved" : "process_max_rss";
}

std::optional<std::int64_t> device_used_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  const c10::cuda::CUDAGuard guard(device);
  std::size_t free = 0, total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<std::int64_t>(total - free);
}

std::optional<std::pair<std::int64_t, std::string>> device_total_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  int index = device.has_index() ? device.index() : 0;
  if (!device.has_index() && cudaGetDevice(&index) != cudaSuccess) {
    (void)cudaGetLastError();
    index = 0;
  }
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, index) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it for whatever asks next
    return std::nullopt;
  }
  return std::make_pair(static_cast<std::int64_t>(props.totalGlobalMem), std::string(props.name));
}

}  // namespace strata
