#pragma once
/// \file offload.hpp
/// Optimizer offload (Plan::offload = Offload::kOptimizer): the optimizer of a rank's owned
/// masters runs on the host, as DeepSpeed's ZeRO-Offload and FSDP2's CPUOffloadPolicy run it.
///
/// The device keeps its float32 masters (what the all-gathers send, the norms read and checkpoints
/// save); the host keeps a float32 copy of each, its gradient buffer and the whole optimizer state,
/// in pinned memory where the device is a GPU. A step copies the masters' gradients to the host
/// (asynchronously, then waits once for the device), runs the same optimizer (the same foreach
/// arithmetic as on the device) over the host copies, and copies them back to the device masters
/// asynchronously on the compute stream; the next step's gradient copy is ordered after them. On
/// the CPU the same code runs with the host as the device, every copy exact.

#include <memory>
#include <vector>

#include <torch/types.h>

#include "strata/kit.hpp"
#include "strata/optim.hpp"

namespace strata::inline kit_v3 {

class OffloadedOptimizer final : public Optimizer {
 public:
  /// Over `masters` (float32, on the job's device, with their gradients): builds `spec`'s
  /// optimizer over host copies of them.
  OffloadedOptimizer(std::vector<torch::Tensor> masters, const OptimizerSpec& spec);
  void step(double lr) override;
  /// The host optimizer's state (host tensors), keyed by the device masters (params()).
  OptimizerState state() const override { return host_optimizer_->state(); }
  void init_state() override { host_optimizer_->init_state(); }
  /// A checkpoint was loaded into the device masters and the host state: the host copies follow.
  void state_loaded() override;
  /// The host copies of the masters (and their gradients): host memory of this rank.
  const std::vector<torch::Tensor>& host_masters() const noexcept { return host_; }
  /// Bytes of host memory the masters' copies and their gradients take.
  std::int64_t host_master_bytes() const;

 private:
  std::vector<torch::Tensor> host_;
  std::unique_ptr<Optimizer> host_optimizer_;
};

}  // namespace strata::inline kit_v3
