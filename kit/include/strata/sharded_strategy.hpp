#pragma once
/// \file sharded_strategy.hpp
/// Base of the strategies that shard parameters by unit (zero3, fsdp): everything but the choice
/// of groups and options is here, on top of strata::UnitShards.

#include <memory>

#include "strata/kit.hpp"
#include "strata/sharded_state.hpp"
#include "strata/strategy.hpp"
#include "strata/unit_shards.hpp"

namespace strata::inline kit_v1 {

class ShardedStrategy : public Strategy, public ShardedState {
 public:
  torch::Tensor forward_backward(const Batch& batch, MicroStep micro) override;
  torch::Tensor finish_gradients(double max_norm) override;
  void step(double lr) override;
  torch::Tensor evaluate(const Batch& batch) override;
  const Model& model() const override { return *model_; }
  double parameter_norm() override;
  /// Master and gradient shards, gathered buffers still allocated, and optimizer state.
  ModelStateBytes memory() const override;
  /// Gathered a group at a time; rank 0 keeps CPU copies.
  StateDict full_state_dict() override;
  /// The master shards (replicas across shard groups split them), optimizer state, frozen state.
  std::vector<TensorPiece> state_pieces(StateAccess access, bool optimizer) override;
  /// Gathered copies refreshed from the masters, the optimizer's step count.
  void state_loaded() override;

 protected:
  /// Shards the model unit by unit over `shard` (replicated over `replicate`, may be null), every
  /// rank starting from rank 0's values (setup traffic over the job), and builds the optimizer over
  /// this rank's master shards. `options.precision` is taken from `setup`. Call from setup().
  void take_over(const StrategySetup& setup, Comm& shard, Comm* replicate, UnitShardOptions options);

  std::shared_ptr<Model> model_;
  std::unique_ptr<UnitShards> shards_;
  std::unique_ptr<Optimizer> optimizer_;
  Comm* comm_ = nullptr;  ///< the job's communicator
  Comm* replicate_ = nullptr;  ///< ranks holding the same shards (HYBRID_SHARD, NO_SHARD), or null
};

}  // namespace strata::inline kit_v1
