#pragma once
/// \file unit_shards.hpp
/// Per-unit flat sharding of parameters, gradients and optimizer state: the machinery of ZeRO-3
/// (Rajbhandari et al. 2019) and FSDP (Zhao et al. 2023), shared by both.
///
/// Each model unit's trainable parameters form one or more flat groups (FSDP's FlatParameter):
/// concatenated, padded with zeros to a multiple of the shard group size N, cut into N equal
/// chunks. Rank r of the shard group keeps chunk r as a float32 master shard (the optimizer's
/// leaf) with a float32 gradient shard. The unit's parameters are views into a full flat buffer
/// (in the policy's parameter dtype) whose *storage* is allocated only while the unit is gathered:
///
///   forward of unit u:   all-gather u (prefetch u+1 ahead) -> run u -> free u (reshard_after_forward)
///   backward of unit u:  pre-hook on u's output gradient: all-gather u again (prefetch u-1)
///                        grad-ready hooks: once all of u's gradients exist, reduce-scatter them
///                        (averaged) into the gradient shard, drop them, free u
///
/// Freeing keeps the tensors and only releases their storage (FSDP's "resize storage to 0"), so
/// the tensors autograd saved in forward stay valid and see the data again after the re-gather.
/// Peak memory then follows the largest gathered units, not the model.
///
/// With a replicate group (HYBRID_SHARD, NO_SHARD), the gradient shards are also averaged across
/// it after the last micro-batch. With N = 1 and float32 parameters, the parameters are views of
/// the master shard itself and nothing is gathered or freed (NO_SHARD).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "strata/buckets.hpp"
#include "strata/comm.hpp"
#include "strata/model.hpp"
#include "strata/precision.hpp"

namespace strata {

/// Releases a tensor's storage in place (0 bytes) while the tensor and every view of it live on.
void free_storage(const torch::Tensor& tensor);
/// Gives a storage freed by free_storage() its size back: `bytes` (contents undefined).
void reallocate_storage(const torch::Tensor& tensor, std::size_t bytes);
/// Bytes of the distinct storages behind `tensors` (a freed storage counts 0, a shared one once).
std::int64_t storage_bytes(const std::vector<torch::Tensor>& tensors);

struct UnitShardOptions {
  /// A unit's parameters are cut into flat groups of about this many bytes (each gathered by one
  /// all-gather); 0 keeps one group per unit.
  std::int64_t group_cap_bytes = 0;
  /// Consecutive groups whose gradients are ready are reduce-scattered together up to this many
  /// bytes; 0 reduces each group alone.
  std::int64_t reduce_cap_bytes = 0;
  /// Free a unit's gathered parameters right after its forward (and gather again for backward);
  /// false keeps them until after its backward (SHARD_GRAD_OP, ZeRO-2-like traffic).
  bool reshard_after_forward = true;
  /// Units whose all-gather is issued ahead of use in forward, and in backward (0: none).
  int forward_prefetch = 1;
  int backward_prefetch = 1;
  /// Launch gradient reduce-scatters asynchronously from the grad-ready hooks during backward;
  /// false reduces after backward, synchronously.
  bool overlap = true;
  PrecisionPolicy precision;
};

/// The sharded state of a model and the hooks that gather, free and reduce it.
class UnitShards {
 public:
  /// Takes over `model` (already on `device`, identical on every rank of `shard`): builds the
  /// groups, keeps this rank's master shards and frees everything else. `replicate` is null, or
  /// the group across which shards are replicated. Both communicators must outlive this object.
  UnitShards(std::shared_ptr<Model> model, torch::Device device, Comm& shard, Comm* replicate,
             UnitShardOptions options);
  ~UnitShards();
  UnitShards(const UnitShards&) = delete;
  UnitShards& operator=(const UnitShards&) = delete;

  /// Runs the model's units on `input` with gathering and freeing around each; with
  /// `train` (and grad mode on) installs the backward hooks of this forward.
  torch::Tensor forward(const torch::Tensor& input, bool train);
  /// After the backward of a micro-batch: completes its reductions into the gradient shards;
  /// `last` (the last micro-batch) also averages them over the replicate group.
  void finish_backward(bool last);
  /// The optimizer's parameters: this rank's float32 master shards (their grads are the
  /// gradient shards).
  const std::vector<torch::Tensor>& masters() const noexcept { return masters_; }
  /// Zeroes the gradient shards.
  void zero_grad();
  /// Sum of squares of all parameters of the model, as a float64 scalar (collective).
  double square_norm();
  /// Sum of squares of all gradients (shards summed over the shard group), float64 (collective).
  double grad_square_norm();
  /// Bytes this rank holds: params (master shards, and gathered buffers while allocated), grads.
  std::pair<std::int64_t, std::int64_t> held_bytes() const;
  /// Every parameter in full, by dotted name in model order (collective over the shard group).
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters();
  /// Groups, padding and policy in one line, for the log.
  std::string describe() const;

 private:
  struct Group;
  struct Unit;
  struct Reduction;
  void gather(std::size_t unit);
  void wait_gathered(std::size_t unit);
  void release(std::size_t unit);
  void pre_backward(std::size_t unit);
  void grad_ready(std::size_t group);
  void flush_reductions(bool all);
  void complete(Reduction& r);

  std::shared_ptr<Model> model_;
  torch::Device device_;
  Comm& shard_;
  Comm* replicate_;
  UnitShardOptions options_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::vector<Unit> units_;
  std::vector<torch::Tensor> masters_;
  std::vector<std::size_t> ready_;          // groups whose gradients are complete, not yet reduced
  std::vector<std::unique_ptr<Reduction>> pending_;
  std::vector<std::unique_ptr<GradReadyHook>> hooks_;
};

}  // namespace strata
