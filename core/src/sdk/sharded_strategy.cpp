#include "strata/sharded_strategy.hpp"

#include <cmath>
#include <map>

#include <torch/utils.h>

#include "strata/replica.hpp"

namespace strata {

void ShardedStrategy::take_over(const StrategySetup& s, Comm& shard, Comm* replicate, UnitShardOptions options) {
  model_ = s.model;
  comm_ = s.comm;
  options.precision = s.precision;
  shards_ = std::make_unique<UnitShards>(model_, s.device, *comm_, shard, replicate, std::move(options));
  optimizer_ = make_optimizer(shards_->masters(), s.optimizer);
}

torch::Tensor ShardedStrategy::forward_backward(const Batch& batch, MicroStep micro) {
  model_->train();
  auto output = shards_->forward(batch.inputs, /*train=*/true);
  auto loss = model_->loss(Precision::output(output), batch.targets);
  shards_->begin_backward(micro);
  (loss / micro.count).backward();
  shards_->end_backward(micro);
  return loss.detach();
}

torch::Tensor ShardedStrategy::finish_gradients(double max_norm) {
  auto norm = shards_->grad_square_norm().sqrt();
  clip_gradients(shards_->master_grads(), norm, max_norm);
  return norm;
}

void ShardedStrategy::step(double lr) {
  optimizer_->step(lr);
  shards_->zero_grad();
}

torch::Tensor ShardedStrategy::evaluate(const torch::Tensor& inputs) {
  model_->eval();
  torch::NoGradGuard no_grad;
  return Precision::output(shards_->forward(inputs, /*train=*/false));
}

double ShardedStrategy::parameter_norm() { return std::sqrt(shards_->square_norm().item<double>()); }

ModelStateBytes ShardedStrategy::memory() const {
  const auto [params, grads] = shards_->held_bytes();
  return {params, grads, optimizer_ ? optimizer_->state_bytes() : 0};
}

StateDict ShardedStrategy::full_state_dict() {
  std::map<std::string, torch::Tensor> values;
  const bool keep = comm_->rank() == 0;
  shards_->for_each_full_parameter([&](const std::string& name, const torch::Tensor& value) {
    if (keep) values[name] = state_dict_copy(value);
  });
  if (!keep) return {};
  StateDict state;
  for (const auto& p : model_->named_parameters())
    if (p.value().requires_grad()) state.emplace_back(p.key(), values.at(p.key()));
  append_frozen_state(state, *model_);
  return state;
}

}  // namespace strata
