#pragma once
/// \file replica.hpp
/// Base of strategies in which every rank holds the whole model (single, ddp): placement,
/// forward/backward of a micro-batch, evaluation, parameter norm and memory accounting of a full
/// replica. A derived strategy adds how gradients are synchronized and what it counts as its
/// gradient memory.

#include <memory>
#include <vector>

#include "strata/strategy.hpp"

namespace strata {

class ReplicaStrategy : public Strategy {
 public:
  torch::Tensor evaluate(const torch::Tensor& inputs) override;
  const Model& model() const override { return *model_; }
  /// L2 norm of the local replica (identical on every rank).
  double parameter_norm() override;
  /// Parameters, gradient_buffers() and optimizer state, from the tensors held.
  ModelStateBytes memory() const override;

 protected:
  /// Moves the model to the device, collects the trainable parameters (and their names) and
  /// builds the optimizer over them. Call first in setup().
  void take_over(const StrategySetup& setup);
  /// take_over() without the optimizer, for strategies that optimize something else (shards).
  void place(const StrategySetup& setup);
  /// Overwrites every parameter and buffer with rank 0's (setup-phase traffic): the same
  /// starting point on every rank, whatever each rank's initialization did.
  void broadcast_from_rank0(Comm& comm);
  /// Forward, loss and backward of one micro-batch, the loss scaled by 1/micro.count.
  torch::Tensor replica_forward_backward(const Batch& batch, MicroStep micro);
  /// The tensors holding gradients between steps (default: each parameter's grad).
  virtual std::vector<torch::Tensor> gradient_buffers() const;

  std::shared_ptr<Model> model_;
  torch::Device device_{torch::kCPU};
  std::vector<torch::Tensor> params_;       ///< trainable parameters, in model order
  std::vector<std::string> param_names_;    ///< their dotted names
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace strata
