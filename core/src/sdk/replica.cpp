#include "strata/replica.hpp"

#include <cmath>

namespace strata {

void ReplicaStrategy::take_over(const StrategySetup& s) {
  place(s);
  optimizer_ = make_optimizer(params_, s.optimizer);
}

void ReplicaStrategy::broadcast_from_rank0(Comm& comm) {
  // In-place writes into leaf parameters must not be recorded by autograd.
  torch::NoGradGuard no_grad;
  for (auto& t : model_->parameters()) comm.broadcast(t, 0);
  for (auto& t : model_->buffers()) comm.broadcast(t, 0);
}

void ReplicaStrategy::place(const StrategySetup& s) {
  model_ = s.model;
  device_ = s.device;
  model_->to(device_);
  for (const auto& p : model_->named_parameters())
    if (p.value().requires_grad()) {
      params_.push_back(p.value());
      param_names_.push_back(p.key());
    }
}

torch::Tensor ReplicaStrategy::replica_forward_backward(const Batch& batch, MicroStep micro) {
  model_->train();
  auto loss = model_->loss(model_->forward(batch.inputs.to(device_)), batch.targets.to(device_));
  (loss / micro.count).backward();
  return loss.detach();
}

torch::Tensor ReplicaStrategy::evaluate(const torch::Tensor& inputs) {
  model_->eval();
  torch::NoGradGuard no_grad;
  return model_->forward(inputs.to(device_));
}

double ReplicaStrategy::parameter_norm() { return std::sqrt(square_sum(params_).item<double>()); }

std::vector<torch::Tensor> ReplicaStrategy::gradient_buffers() const {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_) grads.push_back(p.grad());
  return grads;
}

ModelStateBytes ReplicaStrategy::memory() const {
  return {tensor_bytes(params_), tensor_bytes(gradient_buffers()), optimizer_ ? optimizer_state_bytes(*optimizer_) : 0};
}

}  // namespace strata
