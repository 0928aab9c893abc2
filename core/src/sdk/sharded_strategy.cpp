#include "strata/sharded_strategy.hpp"

#include <cmath>

#include <torch/utils.h>

#include "strata/replica.hpp"

namespace strata {

void ShardedStrategy::take_over(const StrategySetup& s, Comm& shard, Comm* replicate, UnitShardOptions options) {
  model_ = s.model;
  comm_ = s.comm;
  model_->to(s.device);
  broadcast_model(*model_, *comm_);
  options.precision = s.precision;
  shards_ = std::make_unique<UnitShards>(model_, s.device, shard, replicate, options);
  optimizer_ = make_optimizer(shards_->masters(), s.optimizer);
}

torch::Tensor ShardedStrategy::forward_backward(const Batch& batch, MicroStep micro) {
  model_->train();
  auto output = shards_->forward(batch.inputs, /*train=*/true);
  auto loss = model_->loss(output.to(torch::kFloat32), batch.targets.to(output.device()));
  (loss / micro.count).backward();
  shards_->finish_backward(micro.last());
  return loss.detach();
}

double ShardedStrategy::finish_gradients(double max_norm) {
  const double norm = std::sqrt(shards_->grad_square_norm());
  clip_gradients(shards_->masters(), norm, max_norm);
  return norm;
}

void ShardedStrategy::step(double lr) {
  set_learning_rate(*optimizer_, lr);
  optimizer_->step();
  shards_->zero_grad();
}

torch::Tensor ShardedStrategy::evaluate(const torch::Tensor& inputs) {
  model_->eval();
  torch::NoGradGuard no_grad;
  return shards_->forward(inputs, /*train=*/false).to(torch::kFloat32);
}

double ShardedStrategy::parameter_norm() { return std::sqrt(shards_->square_norm()); }

ModelStateBytes ShardedStrategy::memory() const {
  const auto [params, grads] = shards_->held_bytes();
  return {params, grads, optimizer_ ? optimizer_state_bytes(*optimizer_) : 0};
}

StateDict ShardedStrategy::full_state_dict() {
  auto state = shards_->full_parameters();
  if (comm_->rank() != 0) return {};
  append_buffers(state, *model_);
  return state;
}

}  // namespace strata
