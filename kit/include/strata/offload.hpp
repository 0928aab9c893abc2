#pragma once
/// \file offload.hpp
/// Optimizer offload (Plan::offload = Offload::kOptimizer): the optimizer of a rank's owned
/// masters runs on the host, as DeepSpeed's ZeRO-Offload and FSDP2's CPUOffloadPolicy run it.
///
/// The device keeps its float32 masters (what the all-gathers send, the norms read and checkpoints
/// save); the host keeps a float32 copy of each, its gradient buffer and the whole optimizer state,
/// in pinned memory where the device is a GPU. A step is a pipeline over the masters (one per flat
/// group), on a copy stream of its own: every gradient is copied to the host at once
/// (asynchronously, once the compute stream has produced them); the host steps a group as soon as
/// its gradient has landed (the same optimizer, the same foreach arithmetic as on the device, one
/// optimizer per group) while the later ones are still copying, and copies the group's updated
/// master back while it steps the next. The compute stream waits for the copies back on the device,
/// not the host. On the CPU the same code runs with the host as the device, every copy exact.

#include <memory>
#include <optional>
#include <vector>

#include <c10/core/Stream.h>
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
  /// The host optimizers' state (host tensors), keyed by the device masters (params()).
  OptimizerState state() const override;
  void init_state() override;
  /// A checkpoint was loaded into the device masters and the host state: the host copies follow.
  void state_loaded() override;
  /// The host copies of the masters (and their gradients): host memory of this rank.
  const std::vector<torch::Tensor>& host_masters() const noexcept { return host_; }
  /// Bytes of host memory the masters' copies and their gradients take.
  std::int64_t host_master_bytes() const;

 private:
  void step_on_gpu(double lr);
  std::vector<torch::Tensor> host_;
  std::vector<std::unique_ptr<Optimizer>> host_optimizers_;  // one per master: each steps as its gradient lands
  std::optional<c10::Stream> copies_;                         // a GPU's: where the copies run
};

}  // namespace strata::inline kit_v3
