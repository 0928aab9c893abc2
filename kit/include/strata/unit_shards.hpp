#pragma once
/// \file unit_shards.hpp
/// Per-unit flat sharding of parameters, gradients and optimizer state: the machinery of ZeRO-3
/// (Rajbhandari et al. 2019) and FSDP (Zhao et al. 2023), shared by both.
///
/// Each model unit's trainable parameters form one or more flat groups (flat_params.hpp,
/// Residency::kGathered, GradHolding::kShard): rank r of the shard group keeps chunk r as a float32
/// master with a float32 gradient shard; the unit's parameters are views of a full flat buffer whose
/// storage is allocated only while the unit is gathered:
///
///   forward of unit u:   all-gather u (prefetch u+1 ahead) -> run u -> free u (reshard_after_forward)
///   backward of unit u:  pre-hook on u's output gradient: all-gather u again (prefetch u-1)
///                        grad-ready hooks: once all of u's gradients exist, free u and reduce-scatter
///                        them (strata::GradReducer, a bounded number in flight)
///
/// All-gathers run on a communicator of their own (Comm::separate_stream), so on a GPU a prefetch
/// never queues behind a reduce-scatter; both are ordered after the compute stream by c10d's
/// events and waited for by the compute stream (no host sync).
///
/// Freeing keeps the tensors and only releases their storage (FSDP's "resize storage to 0"), so
/// the tensors autograd saved in forward stay valid and see the data again after the re-gather.
/// Peak memory then follows the largest gathered units, not the model. Setup also goes unit by
/// unit: no rank ever holds more than one full unit on the device.
///
/// With a replicate group (HYBRID_SHARD, NO_SHARD), the gradient shards are also averaged across
/// it after the last micro-batch. With N = 1 and float32 parameters, the parameters are views of
/// the master shard itself and nothing is gathered or freed (NO_SHARD), unless the shard group
/// forces collectives (Comm::skips_collectives() false): then one rank gathers, frees and
/// reduce-scatters exactly as N ranks would.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "strata/comm.hpp"
#include "strata/flat_params.hpp"
#include "strata/grad_reducer.hpp"
#include "strata/kit.hpp"
#include "strata/model.hpp"
#include "strata/precision.hpp"

namespace strata::inline kit_v1 {

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
  /// Launch gradient reduce-scatters from the grad-ready hooks during backward; false reduces
  /// after backward.
  bool overlap = true;
  /// Reduce-scatters whose buffers may be alive at once (>= 1).
  int reductions_in_flight = 2;
  PrecisionPolicy precision;
  std::string owner = "sharded";  ///< strategy name for messages
};

/// The sharded state of a model and the hooks that gather, free and reduce it.
class UnitShards {
 public:
  /// Takes over `model` (built on the CPU, identically on every rank) a unit at a time: moves the
  /// unit to `device`, makes every rank start from rank 0's values (broadcast over `job`: setup
  /// traffic), casts its buffers and frozen parameters by the policy, and shards its trainable
  /// parameters over `shard` (replicated over `replicate`, may be null). Refuses, naming them,
  /// trainable parameters registered outside any unit and parameters shared between units. The
  /// communicators must outlive this object.
  UnitShards(std::shared_ptr<Model> model, torch::Device device, Comm& job, Comm& shard, Comm* replicate,
             UnitShardOptions options);
  ~UnitShards();
  UnitShards(const UnitShards&) = delete;
  UnitShards& operator=(const UnitShards&) = delete;

  /// Runs the model's units on `input` (on the device) with gathering and freeing around each;
  /// with `train` (and grad mode on) installs the backward hooks of this forward.
  torch::Tensor forward(const torch::Tensor& input, const BatchContext& context, bool train);
  /// Around the backward of a micro-batch: opens the reductions; then completes them into the
  /// gradient shards (after the last micro-batch also averaged over the replicate group).
  void begin_backward(MicroStep micro);
  void end_backward(MicroStep micro);
  /// The flat groups, in model order: their masters are the optimizer's parameters (this rank's
  /// float32 shards), whose gradients are the gradient shards.
  const FlatGroups& groups() const noexcept { return groups_; }
  /// The group they are sharded over.
  Comm& shard() const noexcept { return shard_; }
  /// Zeroes the gradient shards.
  void zero_grad();
  /// Sum of squares of all parameters of the model, a float64 scalar on the device (collective).
  torch::Tensor square_norm();
  /// Sum of squares of all gradients, a float64 scalar on the device (collective).
  torch::Tensor grad_square_norm();
  /// Bytes this rank holds: params (master shards, and gathered buffers while allocated), grads
  /// (gradient shards and reductions in flight).
  std::pair<std::int64_t, std::int64_t> held_bytes() const;
  /// Groups, padding and policy in one line, for the log.
  std::string describe() const;

 private:
  struct Unit {
    std::vector<std::size_t> groups;  // indices into groups_ (model order)
    std::size_t complete = 0;         // groups whose gradients arrived in this backward
  };
  void take_over_unit(std::size_t u, Comm& job);
  void gather(std::size_t unit);
  void wait_gathered(std::size_t unit);
  void release(std::size_t unit);
  void pre_backward(std::size_t unit);
  void group_complete(std::size_t launch_index);

  std::shared_ptr<Model> model_;
  torch::Device device_;
  Comm& shard_;
  Comm* replicate_;
  std::shared_ptr<Comm> gather_lane_;  // all-gathers: shard_'s ranks on a stream of their own
  UnitShardOptions options_;
  Precision precision_;
  FlatGroups groups_;                               // model order
  std::vector<std::shared_ptr<CommWork>> gathers_;  // per group, while its all-gather runs
  std::vector<torch::Tensor> gather_inputs_;        // per group, alive until its all-gather is waited
  std::vector<Unit> units_;
  std::vector<std::size_t> unit_of_;                // per group: its unit
  std::unique_ptr<GradReducer> reducer_;
};

}  // namespace strata::inline kit_v1
