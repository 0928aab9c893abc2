#include "train/tensor_memory.hpp"

#include <array>
#include <atomic>
#include <limits>
#include <mutex>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "train/device_memory.hpp"

namespace strata::tensor_memory {
namespace {

thread_local int untracked_depth = 0;

/// Wraps LibTorch's CPU allocator: every counted allocation is remembered by its address (so the
/// DataPtr keeps data == context, as raw_allocate() and is_simple_data_ptr() expect) with the
/// allocator's own DataPtr, which frees it.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(std::size_t bytes) override {
    c10::DataPtr inner = base_->allocate(bytes);
    if (untracked_depth > 0 || bytes == 0 || inner.get() == nullptr) return inner;
    void* data = inner.get();
    const auto device = inner.device();
    {
      auto& shard = shard_of(data);
      std::lock_guard lock(shard.mutex);
      shard.blocks.emplace(data, Block{std::move(inner), bytes});
    }
    add(static_cast<std::int64_t>(bytes));
    return {data, data, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  std::int64_t live() const { return live_.load(std::memory_order_relaxed); }
  std::int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  void reset_peak() { peak_.store(live(), std::memory_order_relaxed); }

 private:
  struct Block {
    c10::DataPtr inner;
    std::size_t bytes;
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<void*, Block> blocks;
  };

  static void release(void* data);

  Shard& shard_of(void* data) { return shards_[(reinterpret_cast<std::uintptr_t>(data) >> 6) % shards_.size()]; }

  void add(std::int64_t bytes) {
    const auto now = live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    auto peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  c10::Allocator* base_;
  std::array<Shard, 64> shards_;
  std::atomic<std::int64_t> live_{0};
  std::atomic<std::int64_t> peak_{0};
};

CountingAllocator* counting = nullptr;  // set once by install(); never destroyed (tensors may outlive main)

void CountingAllocator::release(void* data) {
  auto& shard = counting->shard_of(data);
  Block block;
  {
    std::lock_guard lock(shard.mutex);
    auto it = shard.blocks.find(data);
    if (it == shard.blocks.end()) return;  // not ours: cannot happen, and must not crash
    block = std::move(it->second);
    shard.blocks.erase(it);
  }
  counting->live_.fetch_sub(static_cast<std::int64_t>(block.bytes), std::memory_order_relaxed);
}  // block.inner frees the memory through the wrapped allocator

std::int64_t cuda_allocated(const c10::Device& device, bool peak) {
  init_cuda_allocator();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const auto& s = stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return peak ? s.peak : s.current;
}

}  // namespace

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    counting = new CountingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(counting, /*priority=*/std::numeric_limits<std::uint8_t>::max());
  });
}

std::int64_t live_bytes(const c10::Device& device) {
  if (device.is_cuda()) return cuda_allocated(device, false);
  return counting != nullptr ? counting->live() : 0;
}

std::int64_t peak_bytes(const c10::Device& device) {
  if (device.is_cuda()) return cuda_allocated(device, true);
  return counting != nullptr ? counting->peak() : 0;
}

void reset_peak(const c10::Device& device) {
  if (device.is_cuda()) {
    init_cuda_allocator();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  } else if (counting != nullptr) {
    counting->reset_peak();
  }
}

std::string source(const c10::Device& device) {
  return device.is_cuda() ? "cuda_allocated" : "cpu_counting_allocator";
}

Untracked::Untracked() { ++untracked_depth; }
Untracked::~Untracked() { --untracked_depth; }

}  // namespace strata::tensor_memory
