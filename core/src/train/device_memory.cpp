#include "train/device_memory.hpp"

#include <sys/resource.h>

#include <c10/cuda/CUDACachingAllocator.h>

namespace strata {

void reset_peak_memory(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

std::int64_t peak_memory_bytes(const c10::Device& device) {
  if (device.is_cuda()) {
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

}  // namespace strata
