#pragma once
/// \file replica.hpp
/// Base of strategies in which every rank holds the whole model (single, dp, ddp, zero1, zero2,
/// the template's local_sgd): the parameters live in flat groups (flat_params.hpp) of about
/// `bucket_cap_bytes`, in reverse parameter order (the order backward completes them), whose
/// float32 masters the optimizer steps. A derived strategy chooses how the masters and gradients
/// are sharded and how gradients are synchronized (a Reducer: the built-in GradReducer, or its own).
///
/// Invariant: after step(), every parameter equals its master (cast to the parameter dtype), on
/// every rank.

#include <memory>
#include <string>
#include <vector>

#include "strata/flat_params.hpp"
#include "strata/grad_reducer.hpp"
#include "strata/kit.hpp"
#include "strata/reducer.hpp"
#include "strata/sharded_state.hpp"
#include "strata/strategy.hpp"

namespace strata::inline kit_v1 {

/// Overwrites every parameter and buffer of `module` with rank 0's (booked to the current phase,
/// setup): the same starting point on every rank, whatever each rank's initialization did.
void broadcast_module(torch::nn::Module& module, Comm& comm);

/// Appends every buffer and frozen parameter of `model` to `state` (as state_dict_copy).
void append_frozen_state(StateDict& state, const Model& model);

/// The model's full state on the CPU, for Strategy::full_state_dict(): every trainable parameter
/// from its group's float32 master (gathered over `shard` a group at a time, so no rank holds more
/// than one gathered group; a collective of the shard group), `aliases` (tied names: alias,
/// parameter) filled from the parameter they share, then frozen parameters and buffers. Ranks other
/// than the one that `keeps` it get an empty dict.
StateDict gathered_state_dict(const FlatGroups& groups, Comm* shard, const Model& model, bool keep,
                              const std::vector<std::pair<std::string, std::string>>& aliases = {});

/// How a replica strategy lays out and shards its flat groups.
struct ReplicaLayout {
  /// Flat groups of about this many bytes (a larger parameter gets a group of its own).
  std::int64_t bucket_cap_bytes = 25 * 1024 * 1024;
  /// Masters (and, for kShard, gradients) sharded over this group (zero1, zero2); null: every rank
  /// holds every master.
  Comm* shard = nullptr;
  GradHolding grads = GradHolding::kFull;
};

class ReplicaStrategy : public Strategy, public ReplicaDigest, public ShardedState {
 public:
  /// Forward and backward of the micro-batch (replica_forward_backward) inside the reducer's
  /// round, when there is one.
  torch::Tensor forward_backward(const Batch& batch, MicroStep micro) override;
  /// Global norm of the masters' gradients (over the shard group when sharded), clipped.
  torch::Tensor finish_gradients(double max_norm) override;
  /// Optimizer step on the masters, copied into the parameters (all-gathered when sharded),
  /// gradients zeroed in place.
  void step(double lr) override;
  torch::Tensor evaluate(const Batch& batch) override;
  const Model& model() const override { return *model_; }
  /// L2 norm of the masters (over the shard group when sharded).
  double parameter_norm() override;
  /// Parameters and masters, gradient buffers and optimizer state, from the tensors held.
  ModelStateBytes memory() const override;
  /// The float32 masters (gathered to rank 0 when sharded), frozen parameters and buffers.
  StateDict full_state_dict() override;
  std::vector<std::uint32_t> replica_digests() const override;
  /// The masters' chunks (replicas split what they hold alike), optimizer state, frozen state.
  std::vector<TensorPiece> state_pieces(StateAccess access, bool optimizer) override;
  /// Masters into the parameters (all-gathered when sharded), the optimizer's step count.
  void state_loaded() override;

 protected:
  /// Moves the model to the device, makes every rank start from rank 0's values (setup traffic,
  /// none on one rank), casts buffers and frozen parameters by the precision policy, builds the
  /// flat groups and the optimizer over their masters. Call first in setup().
  void take_over(const StrategySetup& setup, ReplicaLayout layout = {});
  /// Synchronizes gradients through a GradReducer over the groups (ddp, zero1/2); without one the
  /// gradients stay local (single, dp, local_sgd), though still accumulated in float32.
  void reduce_gradients(GradReducerOptions options);
  /// Installs `reducer` in place of the current one (destroyed, its hooks removed): every
  /// backward runs between its begin_backward and end_backward. A strategy's own reducer reads and
  /// writes the float32 gradients through grad_view(i) and communicates over comm_; after
  /// take_over() reducer_ accumulates them locally, so it may take that one over
  /// (std::move(reducer_)) and call it first.
  void use_reducer(std::unique_ptr<Reducer> reducer);
  /// Forward, loss and backward of one micro-batch, the summed loss scaled by micro.loss_scale;
  /// returns the micro-batch's summed loss, detached.
  torch::Tensor replica_forward_backward(const Batch& batch, MicroStep micro);
  /// Writes every master into the parameters (all-gathering the owned chunks when sharded).
  void masters_to_params();
  /// Zeroes every gradient buffer.
  void zero_grad();
  /// The float32 gradient views of parameter i of params_ (kFull groups).
  const torch::Tensor& grad_view(std::size_t i) const;
  /// The masters, one per group (what the optimizer steps).
  std::vector<torch::Tensor> masters() const;

  std::shared_ptr<Model> model_;
  torch::Device device_{torch::kCPU};
  Comm* comm_ = nullptr;                   ///< the job's communicator
  Precision precision_;
  ReplicaLayout layout_;
  FlatGroups groups_;                      ///< in launch order (reverse parameter order)
  std::vector<torch::Tensor> params_;      ///< trainable parameters (each once), in model order
  std::vector<std::string> param_names_;   ///< their dotted names
  std::vector<std::pair<std::string, std::string>> aliases_;  ///< tied names: (alias, parameter)
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Reducer> reducer_;      ///< never null after take_over()
  /// Sharded masters: consecutive groups all-gathered in one call up to this many bytes (a staging
  /// buffer of that size); 0: each group in place, in a call of its own.
  std::int64_t allgather_cap_bytes_ = 0;
  int rank_ = 0;

 private:
  std::vector<std::pair<std::size_t, std::size_t>> locate_;  // params_[i] -> (group, index in group)
};

}  // namespace strata::inline kit_v1
