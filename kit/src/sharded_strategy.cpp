#include "strata/sharded_strategy.hpp"

#include <cmath>

#include <torch/utils.h>

#include "strata/replica.hpp"

namespace strata::inline kit_v1 {

void ShardedStrategy::take_over(const StrategySetup& s, Comm& shard, Comm* replicate, UnitShardOptions options) {
  model_ = s.model;
  comm_ = s.comm;
  replicate_ = replicate;
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
  if (max_norm == kNormNotNeeded) return {};
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

std::vector<TensorPiece> ShardedStrategy::state_pieces(StateAccess access, bool optimizer) {
  PieceOwner owner;
  owner.first = comm_->rank() == 0;
  if (replicate_ != nullptr) owner.replica = replicate_->rank(), owner.replicas = replicate_->world_size();
  auto pieces = flat_state_pieces(shards_->groups(), optimizer ? optimizer_.get() : nullptr, access, owner);
  for (auto& p : frozen_state_pieces(*model_, access, owner)) pieces.push_back(std::move(p));
  return pieces;
}

void ShardedStrategy::state_loaded() {
  torch::NoGradGuard no_grad;
  for (const auto& g : shards_->groups())
    if (g->materialized()) g->master_to_full();
  optimizer_->state_loaded();
}

}  // namespace strata::inline kit_v1
