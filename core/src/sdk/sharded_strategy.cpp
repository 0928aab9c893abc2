#include "strata/sharded_strategy.hpp"

#include <cmath>

#include <torch/utils.h>

#include "strata/replica.hpp"

namespace strata {

void ShardedStrategy::take_over(const StrategySetup& s, Comm& shard, Comm* replicate, UnitShardOptions options) {
  model_ = s.model;
  comm_ = s.comm;
  options.precision = s.precision;
  shards_ = std::make_unique<UnitShards>(model_, s.device, *comm_, shard, replicate, std::move(options));
  optimizer_ = make_optimizer(group_masters(shards_->groups()), s.optimizer);
}

torch::Tensor ShardedStrategy::forward_backward(const Batch& batch, MicroStep micro) {
  model_->train();
  auto output = shards_->forward(batch.inputs, BatchContext::of(batch), /*train=*/true);
  auto loss = model_->loss(Precision::output(output), batch);
  shards_->begin_backward(micro);
  micro.scaled(loss).backward();
  shards_->end_backward(micro);
  return loss.detach();
}

torch::Tensor ShardedStrategy::finish_gradients(double max_norm) {
  auto norm = shards_->grad_square_norm().sqrt();
  clip_gradients(group_master_grads(shards_->groups()), norm, max_norm);
  return norm;
}

void ShardedStrategy::step(double lr) {
  optimizer_->step(lr);
  shards_->zero_grad();
}

torch::Tensor ShardedStrategy::evaluate(const Batch& batch) {
  model_->eval();
  torch::NoGradGuard no_grad;
  return Precision::output(shards_->forward(batch.inputs, BatchContext::of(batch), /*train=*/false));
}

double ShardedStrategy::parameter_norm() { return std::sqrt(shards_->square_norm().item<double>()); }

ModelStateBytes ShardedStrategy::memory() const {
  const auto [params, grads] = shards_->held_bytes();
  return {params, grads, optimizer_ ? optimizer_->state_bytes() : 0};
}

StateDict ShardedStrategy::full_state_dict() {
  return gathered_state_dict(shards_->groups(), &shards_->shard(), *model_, comm_->rank() == 0);
}

}  // namespace strata
