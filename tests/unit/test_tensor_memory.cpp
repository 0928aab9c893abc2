// The counting CPU allocator behind memory.peak_tensor_bytes: live and peak bytes of the tensors
// allocated after its installation, host data left out on request.
#include "test_support.hpp"

#include <c10/core/CPUAllocator.h>

#include "train/tensor_memory.hpp"

namespace memory = strata::tensor_memory;

TEST_CASE("the counting allocator measures live and peak tensor bytes") {
  memory::install();
  memory::install();  // idempotent
  const torch::Device cpu(torch::kCPU);
  CHECK(memory::source(cpu) == "cpu_counting_allocator");
  const auto base = memory::live_bytes(cpu);
  memory::reset_peak(cpu);
  CHECK(memory::peak_bytes(cpu) == base);
  {
    auto a = torch::empty({1 << 20}, torch::kFloat32);  // 4 MiB
    CHECK(memory::live_bytes(cpu) == base + (4 << 20));
    {
      auto b = torch::empty({1 << 18}, torch::kFloat64);  // 2 MiB
      CHECK(memory::live_bytes(cpu) == base + (6 << 20));
    }
    CHECK(memory::live_bytes(cpu) == base + (4 << 20));
  }
  CHECK(memory::live_bytes(cpu) == base);
  CHECK(memory::peak_bytes(cpu) == base + (6 << 20));
  memory::reset_peak(cpu);
  CHECK(memory::peak_bytes(cpu) == base);
  {
    memory::Untracked host_data;
    auto c = torch::empty({1 << 20}, torch::kFloat32);
    CHECK(memory::live_bytes(cpu) == base);
  }
  CHECK(memory::live_bytes(cpu) == base);  // freeing an untracked tensor changes nothing either
  CHECK(memory::peak_bytes(cpu) == base);
  // A storage released in place and given its size back (FSDP's trick) is counted both ways.
  auto t = torch::empty({1024}, torch::kFloat32);
  auto* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(0));
  storage->set_nbytes(0);
  CHECK(memory::live_bytes(cpu) == base);
  void* raw = c10::GetCPUAllocator()->raw_allocate(100);  // raw allocations work and are counted
  CHECK(memory::live_bytes(cpu) == base + 100);
  c10::GetCPUAllocator()->raw_deallocate(raw);
  CHECK(memory::live_bytes(cpu) == base);
}
