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

/// Overwrites every parameter and buffer of `model` with rank 0's (booked to the current phase,
/// setup): the same starting point on every rank, whatever each rank's initialization did.
void broadcast_model(Model& model, Comm& comm);

/// `tensor` as a state-dict entry: a detached copy, float32 when floating point.
torch::Tensor state_dict_copy(const torch::Tensor& tensor);
/// Appends every buffer of `model` to `state` (as state_dict_copy).
void append_buffers(StateDict& state, const Model& model);

/// With a mixed precision policy the replica computes in the low dtype while float32 master
/// copies of the parameters carry the optimizer: gradients are copied up to the masters before
/// clipping, and the updated masters are copied down to the replica after the step.
class ReplicaStrategy : public Strategy {
 public:
  torch::Tensor evaluate(const torch::Tensor& inputs) override;
  const Model& model() const override { return *model_; }
  /// L2 norm of the local replica (identical on every rank).
  double parameter_norm() override;
  /// Parameters (and masters), gradient_buffers() (and master gradients) and optimizer state,
  /// from the tensors held.
  ModelStateBytes memory() const override;
  /// Rank 0's replica (its float32 masters under a mixed policy) and buffers.
  StateDict full_state_dict() override;

 protected:
  /// Moves the model to the device, makes every rank start from rank 0's values (setup traffic,
  /// none on one rank), casts it to the policy's parameter dtype (keeping float32 masters),
  /// collects the trainable parameters (and their names) and builds the optimizer over the
  /// masters (or the parameters). Call first in setup().
  void take_over(const StrategySetup& setup);
  /// take_over() without the optimizer and the precision policy, for strategies that optimize
  /// something else (shards) and handle the policy themselves.
  void place(const StrategySetup& setup);
  /// Forward, loss and backward of one micro-batch, the loss scaled by 1/micro.count.
  torch::Tensor replica_forward_backward(const Batch& batch, MicroStep micro);
  /// Once gradients are synchronized: copies them up to the masters (mixed policy), computes the
  /// global norm, clips, and returns the norm before clipping.
  double clip_replica_gradients(double max_norm);
  /// Optimizer step at `lr`, masters copied down to the replica (mixed policy), gradients zeroed
  /// in place (the buffers stay allocated, as every strategy's gradient memory is counted).
  void replica_step(double lr);
  /// The tensors holding gradients between steps (default: each parameter's grad).
  virtual std::vector<torch::Tensor> gradient_buffers() const;

  std::shared_ptr<Model> model_;
  torch::Device device_{torch::kCPU};
  std::vector<torch::Tensor> params_;       ///< trainable parameters, in model order
  std::vector<std::string> param_names_;    ///< their dotted names
  std::vector<torch::Tensor> masters_;      ///< float32 masters of params_ (mixed policy only)
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  PrecisionPolicy precision_;
  int rank_ = 0;
};

}  // namespace strata
