#include "strata/strategy.hpp"

#include "io/crc32c.hpp"

namespace strata {

ReplicaDigest::~ReplicaDigest() = default;
MultiDevice::~MultiDevice() = default;

torch::Tensor state_dict_copy(const torch::Tensor& tensor) {
  auto cpu = tensor.detach().to(torch::kCPU);
  if (cpu.is_floating_point()) cpu = cpu.to(torch::kFloat32);
  return cpu.is_same(tensor) || cpu.data_ptr() == tensor.data_ptr() ? cpu.clone() : cpu;
}

std::uint32_t tensor_digest(const torch::Tensor& tensor, std::uint32_t crc) {
  const auto cpu = tensor.detach().to(torch::kCPU).contiguous();
  return crc32c(cpu.data_ptr(), cpu.nbytes(), crc);
}

}  // namespace strata
