#include "strata/replica.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <torch/utils.h>

#include "strata/errors.hpp"

namespace strata {

MultiDevice::~MultiDevice() = default;

void broadcast_model(Model& model, Comm& comm) {
  if (comm.world_size() == 1) return;
  // In-place writes into leaf parameters must not be recorded by autograd.
  torch::NoGradGuard no_grad;
  for (auto& t : model.parameters()) comm.broadcast(t, 0);
  for (auto& t : model.buffers()) comm.broadcast(t, 0);
}

torch::Tensor state_dict_copy(const torch::Tensor& tensor) {
  return tensor.is_floating_point() ? tensor.detach().to(torch::kFloat32, false, /*copy=*/true)
                                    : tensor.detach().clone();
}

void append_buffers(StateDict& state, const Model& model) {
  for (const auto& b : model.named_buffers()) state.emplace_back(b.key(), state_dict_copy(b.value()));
}

void ReplicaStrategy::place(const StrategySetup& s) {
  model_ = s.model;
  device_ = s.device;
  rank_ = s.comm->rank();
  model_->to(device_);
  broadcast_model(*model_, *s.comm);
  for (const auto& p : model_->named_parameters())
    if (p.value().requires_grad()) {
      params_.push_back(p.value());
      param_names_.push_back(p.key());
    }
}

void ReplicaStrategy::take_over(const StrategySetup& s) {
  place(s);
  precision_ = s.precision;
  if (precision_.mixed()) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params_) {
      auto master = p.detach().to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
      master.set_requires_grad(true);
      master.mutable_grad() = torch::zeros_like(master);
      masters_.push_back(master);
    }
    model_->to(precision_.param);
  }
  optimizer_ = make_optimizer(precision_.mixed() ? masters_ : params_, s.optimizer);
}

torch::Tensor ReplicaStrategy::replica_forward_backward(const Batch& batch, MicroStep micro) {
  model_->train();
  auto inputs = batch.inputs.to(device_);
  if (precision_.mixed() && inputs.is_floating_point()) inputs = inputs.to(precision_.param);
  auto output = model_->forward(inputs).to(torch::kFloat32);
  auto loss = model_->loss(output, batch.targets.to(device_));
  (loss / micro.count).backward();
  return loss.detach();
}

double ReplicaStrategy::clip_replica_gradients(double max_norm) {
  if (precision_.mixed()) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& g = params_[i].grad();
      if (g.defined()) masters_[i].mutable_grad().copy_(g);
    }
  }
  const auto& optimized = precision_.mixed() ? masters_ : params_;
  const double norm = std::sqrt(grad_square_sum(optimized).item<double>());
  clip_gradients(optimized, norm, max_norm);
  return norm;
}

void ReplicaStrategy::replica_step(double lr) {
  set_learning_rate(*optimizer_, lr);
  optimizer_->step();
  torch::NoGradGuard no_grad;
  if (precision_.mixed())
    for (std::size_t i = 0; i < params_.size(); ++i) params_[i].copy_(masters_[i]);
  // Zeroed in place (not optimizer zero_grad, which detaches: gradients may be bucket views).
  for (const auto* list : {&params_, &masters_})
    for (const auto& t : *list)
      if (t.grad().defined()) t.grad().zero_();
}

torch::Tensor ReplicaStrategy::evaluate(const torch::Tensor& inputs) {
  model_->eval();
  torch::NoGradGuard no_grad;
  auto x = inputs.to(device_);
  if (precision_.mixed() && x.is_floating_point()) x = x.to(precision_.param);
  return model_->forward(x).to(torch::kFloat32);
}

double ReplicaStrategy::parameter_norm() {
  return std::sqrt(square_sum(precision_.mixed() ? masters_ : params_).item<double>());
}

std::vector<torch::Tensor> ReplicaStrategy::gradient_buffers() const {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_) grads.push_back(p.grad());
  return grads;
}

ModelStateBytes ReplicaStrategy::memory() const {
  auto grads = gradient_buffers();
  for (const auto& m : masters_) grads.push_back(m.grad());
  return {tensor_bytes(params_) + tensor_bytes(masters_), tensor_bytes(grads),
          optimizer_ ? optimizer_state_bytes(*optimizer_) : 0};
}

StateDict ReplicaStrategy::full_state_dict() {
  StateDict state;
  if (rank_ != 0) return state;
  torch::NoGradGuard no_grad;
  for (const auto& p : model_->named_parameters()) {
    torch::Tensor value = p.value();
    if (precision_.mixed()) {
      auto it = std::find(param_names_.begin(), param_names_.end(), p.key());
      if (it != param_names_.end()) value = masters_[static_cast<std::size_t>(it - param_names_.begin())];
    }
    state.emplace_back(p.key(), state_dict_copy(value));
  }
  append_buffers(state, *model_);
  return state;
}

}  // namespace strata
