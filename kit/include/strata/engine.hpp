#pragma once
/// \file engine.hpp
/// The kit's one strategy engine: it runs any Plan (plan.hpp) over a Mesh (mesh.hpp). It owns the
/// step (forward unit by unit, loss, backward inside the Reducer's round, gradient norm and
/// clipping, optimizer step on float32 masters, parameters refreshed), the state (memory, state
/// dict, checkpoint pieces, replica digests) and the flat layout (flat_params.hpp):
///
///   replicated parameters (kNothing, kOptimizer, kGradients): every rank holds the whole model in
///     flat groups of about Plan::group_bytes, in reverse parameter order (the order backward
///     completes them), padded to a multiple of the shard group; masters (and for kGradients the
///     gradients) are sharded over the shard group, and the updated chunks all-gathered after the
///     step. Tied parameters are held once.
///   sharded parameters (kParameters): each model unit's parameters form flat groups sharded over
///     the shard group whose full storage exists only while the unit is gathered (FSDP's
///     FlatParameter, "resize storage to 0" in between); setup goes a unit at a time, so no rank
///     ever holds more than one full unit.
///
/// Gradients go through a Reducer (reducer.hpp): the built-in GradReducer (bucketed all-reduce
/// over the replicate group, reduce-scatter over the shard group, overlapped with backward through
/// grad-ready hooks, a bounded number in flight), or a strategy's own (use_reducer).
///
/// Lifecycle hooks: virtual members with defaults, so a strategy changes one moment without
/// copying the engine. In the order of a training micro-batch:
///
///   before_unit_forward(u)      gather u (prefetching the next units) and wait for it
///   after_unit_forward(u, bw)   reshard u by its UnitPlan (keep, free, or keep a sub-group copy)
///   before_unit_backward(u)     gather u again (from the shard group or the sub-group copy,
///                               prefetching the previous units) and wait for it
///   gradient_ready(g)           every gradient of flat group g arrived (autograd's thread):
///                               frees a gathered unit once all of its groups are ready
///   after_backward(micro)       after the reducer's end_backward: frees what is still gathered
///   after_step()                after the optimizer step and the parameters' refresh (with
///                               Plan::wait_params_per_unit, the refresh may still be arriving:
///                               wait_params() before reading parameters)
///
/// For replicated units the gather and reshard defaults do nothing. Communication on CUDA runs on
/// the communicators' own streams, ordered after the compute stream by c10d's events and waited
/// for by the compute stream (no host sync); every rank issues the same collectives in the same
/// order.
///
/// Invariants: after step(), every parameter equals its master (cast to the parameter dtype) on
/// every rank that holds it; gathered storage is freed only after every collective writing it was
/// waited for (free_storage's contract).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "strata/buckets.hpp"
#include "strata/flat_params.hpp"
#include "strata/grad_reducer.hpp"
#include "strata/kit.hpp"
#include "strata/mesh.hpp"
#include "strata/plan.hpp"
#include "strata/reducer.hpp"
#include "strata/sharded_state.hpp"
#include "strata/strategy.hpp"

namespace strata::inline kit_v3 {

/// The topology a strategy's setup makes its plan for (add_plan, plan.hpp).
inline Topology topology_of(const StrategySetup& setup) {
  return {setup.comm != nullptr ? setup.comm->world_size() : 1, setup.local_world_size};
}

/// Overwrites every parameter and buffer of `module` with rank 0's (booked to the current phase,
/// setup): the same starting point on every rank, whatever each rank's initialization did.
void broadcast_module(torch::nn::Module& module, Comm& comm, const std::unordered_set<const void*>& skip = {});

/// Appends every buffer and frozen parameter of `model` to `state` (as state_dict_copy).
void append_frozen_state(StateDict& state, const Model& model);

/// The model's full state on the CPU, for Strategy::full_state_dict(): every trainable parameter
/// from its group's float32 master (gathered over `shard` a group at a time, so no rank holds more
/// than one gathered group; a collective of the shard group), `aliases` (tied names: alias,
/// parameter) filled from the parameter they share, then frozen parameters and buffers. Ranks other
/// than the one that `keeps` it get an empty dict.
StateDict gathered_state_dict(const FlatGroups& groups, Comm* shard, const Model& model, bool keep,
                              const std::vector<std::pair<std::string, std::string>>& aliases = {});

class Engine : public Strategy, public ReplicaDigest, public ShardedState {
 public:
  Engine();
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Forward unit by unit, loss, backward inside the reducer's round.
  torch::Tensor forward_backward(const Batch& batch, MicroStep micro) override;
  /// Global norm of the masters' gradients (over the shard group when sharded), clipped.
  torch::Tensor finish_gradients(double max_norm) override;
  /// Optimizer step on the masters; parameters refreshed (all-gathered when sharded and
  /// replicated); gradients zeroed in place; after_step().
  void step(double lr) override;
  torch::Tensor evaluate(const Batch& batch) override;
  const Model& model() const override { return *model_; }
  /// L2 norm of the masters (over the shard group when sharded).
  double parameter_norm() override;
  /// Parameters (masters, full buffers while allocated, gather inputs and sub-group copies),
  /// gradients (buffers or shards, reductions in flight) and optimizer state, from the tensors held.
  ModelStateBytes memory() const override;
  /// The float32 masters (gathered to rank 0 when sharded), frozen parameters and buffers.
  StateDict full_state_dict() override;
  /// Replicated parameters: a digest of this rank's replica; sharded ones: none (empty).
  std::vector<std::uint32_t> replica_digests() const override;
  /// The masters' chunks (replicas split what they hold alike), optimizer state, frozen state.
  std::vector<TensorPiece> state_pieces(StateAccess access, bool optimizer) override;
  /// Masters into the parameters, the optimizer's step count.
  void state_loaded() override;

 protected:
  /// Runs `plan`: moves the model to the device (a unit at a time when sharded), makes every rank
  /// start from rank 0's values (setup traffic, none on one rank), casts buffers and frozen
  /// parameters by the precision policy, builds the mesh, the flat groups, the reducer and the
  /// optimizer over this rank's masters. Call first in setup().
  void take_over(const StrategySetup& setup, Plan plan);
  /// Replicas whose gradients stay local (accumulated in float32): single, dp, local_sgd.
  void take_over(const StrategySetup& setup);

  // ---- hooks (see the file comment); the defaults are the plan's behaviour
  virtual void before_unit_forward(std::size_t unit);
  virtual void after_unit_forward(std::size_t unit, bool backward_follows);
  virtual void before_unit_backward(std::size_t unit);
  virtual void gradient_ready(std::size_t group);
  virtual void after_backward(MicroStep micro);
  virtual void after_step() {}

  // ---- what hooks build on
  /// Issues unit's all-gathers (from its sub-group copy when it has one, else over the shard
  /// group), asynchronously; nothing for a replicated or already gathered unit.
  void gather(std::size_t unit);
  /// Makes the compute stream wait for unit's all-gathers (the host does not wait).
  void wait_gathered(std::size_t unit);
  /// Frees unit's gathered storage (after waiting for its all-gathers) and its sub-group copy.
  void release(std::size_t unit);
  /// Keeps the part of unit's gathered parameters that this rank's sub-group position owns, then
  /// frees the rest: before_unit_backward gathers it back over the sub-group.
  void reshard_to_subgroup(std::size_t unit);
  /// One unit of the model (FSDP2's FSDPParamGroup), everything the engine keeps of it. Sharded:
  /// its flat groups, its plan, the sub-group its copy is sharded over, and per group what is in
  /// flight between gather() and release(). Replicated: the groups holding its parameters, whose
  /// post-step all-gathers its forward waits for (wait_params(unit)).
  struct UnitState {
    struct Slot {
      std::shared_ptr<CommWork> work;  ///< the all-gather, while it runs
      torch::Tensor input;             ///< its input, alive until it is waited for
      torch::Tensor encoded;           ///< a gather codec's gathered bytes, decoded when waited for
      int encoded_ranks = 0;           ///< the ranks that sent them
      torch::Tensor subgroup_copy;     ///< Reshard::kSubgroup: the part kept between forward and backward
    };
    std::vector<std::size_t> groups;  ///< sharded groups (indices into groups_), in model order
    /// Replicated: the groups holding its parameters (unit 0: also those of no unit).
    std::vector<std::size_t> replicated_groups;
    std::vector<Slot> slots;          ///< per group, in that order
    std::size_t complete = 0;         ///< groups whose gradients arrived in this backward
    UnitPlan plan;
    Comm* subgroup = nullptr;         ///< Reshard::kSubgroup: the sub-group its copy is sharded over
    /// Tied weights (a parameter two units read, as an embedding and the head tied to it): the
    /// parameter is placed in the first unit holding it. `reads_from`: the earlier units whose
    /// parameters this one reads too (gathered before it runs); `read_until`: for such an earlier
    /// unit, the last unit reading it, which it stays gathered for (through backward, where its
    /// gradient arrives last: autograd sums both uses before it accumulates).
    std::vector<std::size_t> reads_from;
    std::size_t read_until = 0;
  };
  /// Whether unit has sharded (gathered) groups.
  bool gathered_unit(std::size_t unit) const { return !units_.at(unit).groups.empty(); }
  const UnitPlan& unit_plan(std::size_t unit) const { return units_.at(unit).plan; }
  const UnitState& unit_state(std::size_t unit) const { return units_.at(unit); }

  /// Installs `reducer` in place of the current one (destroyed, its hooks removed): every
  /// backward runs between its begin_backward and end_backward. A strategy's own reducer reads and
  /// writes the float32 gradients through grad_view(i) and communicates over comm_; after
  /// take_over() reducer_ is the plan's, so it may take that one over (std::move(reducer_)) and
  /// call it first.
  void use_reducer(std::unique_ptr<Reducer> reducer);
  /// Forward (run_units), loss and backward of `batch` on `model` (this engine's, or a replica a
  /// strategy holds), the summed loss scaled by micro.loss_scale; returns it, detached. No reducer
  /// round: forward_backward() opens and closes it around this.
  torch::Tensor loss_backward(Model& model, const Batch& batch, MicroStep micro);
  /// Runs the model's units on `input` with the hooks around each (train: installs the backward
  /// hooks); evaluation releases every unit after its forward.
  torch::Tensor run_units(const torch::Tensor& input, const BatchContext& context, bool train);
  /// Writes every master into its parameters (all-gathering the owned chunks of replicated,
  /// sharded groups; with Plan::wait_params_per_unit those all-gathers are left in flight).
  void masters_to_params();
  /// Makes the compute stream wait for the all-gathers still refreshing unit's parameters (the
  /// host does not wait on CUDA); run_units calls it before each unit's forward.
  void wait_params(std::size_t unit);
  /// The same for every parameter.
  void wait_params() const;
  /// Zeroes every gradient buffer.
  void zero_grad();
  /// The float32 gradient view of parameter i of params_ (replicated groups with full gradients).
  const torch::Tensor& grad_view(std::size_t i) const;
  /// The masters, one per group (what the optimizer steps).
  std::vector<torch::Tensor> masters() const { return group_masters(groups_); }
  /// The communicator the masters are sharded over; null when they are not.
  Comm* master_shard() const noexcept { return plan_.sharded != Sharded::kNothing ? &mesh_.shard() : nullptr; }
  /// The log line of the layout: groups, padding, mesh, in-flight bound.
  std::string describe() const;

  std::shared_ptr<Model> model_;
  torch::Device device_{torch::kCPU};
  Comm* comm_ = nullptr;  ///< the job's communicator
  Mesh mesh_;
  Plan plan_;
  Precision precision_;
  FlatGroups groups_;  ///< replicated: launch order (reverse parameter order); sharded: model order
  std::vector<torch::Tensor> params_;      ///< trainable parameters (each once), in model order (replicated)
  std::vector<std::string> param_names_;   ///< their dotted names
  std::vector<std::pair<std::string, std::string>> aliases_;  ///< tied names: (alias, parameter)
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Reducer> reducer_;  ///< never null after take_over()
  /// The grad-ready hooks of every trainable parameter, the engine's: each tells reducer_ (whichever
  /// is installed) that its gradient arrived. Declared after reducer_: removed before it is destroyed.
  std::vector<std::unique_ptr<GradReadyHook>> grad_hooks_;

 private:
  void take_over_replicated();
  void take_over_sharded();
  /// `holder`: the unit and name that placed each parameter taken over so far (tied weights).
  void take_over_unit(std::size_t u, std::unordered_map<const void*, std::pair<std::size_t, std::string>>& holder);
  void make_reducer();
  void prefetch(std::size_t unit, bool forward);

  bool sharded_params() const noexcept { return plan_.sharded == Sharded::kParameters; }

  /// One flat group's place: its unit (sharded) and the post-step all-gather refreshing it
  /// (replicated: its entry in param_gathers_ while one is issued, else -1).
  struct GroupPlace {
    std::size_t unit = 0;
    std::ptrdiff_t refresh = -1;
  };

  std::vector<UnitState> units_;    // per unit of the model
  std::vector<GroupPlace> placed_;  // per flat group of groups_
  std::vector<std::pair<std::size_t, std::size_t>> locate_;  // params_[i] -> (group, index in group)
  std::shared_ptr<Comm> gather_lane_;  // all-gathers over the shard group, on a stream of their own
  std::unique_ptr<GatherCodec> codec_;  // Plan::gather_codec's, or null
  std::shared_ptr<Comm> reduce_lane_;   // a reduce codec's all-to-all inside sub-groups, on a stream of its own

  /// An all-gather refreshing replicated parameters after the step (one group in place, or several
  /// through a staging buffer that is copied out once it is waited for).
  struct ParamGather {
    std::vector<std::size_t> groups;
    torch::Tensor input, output;
    std::shared_ptr<CommWork> work;  // null once waited for
  };
  void finish_param_gather(ParamGather& gather) const;
  mutable std::vector<ParamGather> param_gathers_;  // issued by masters_to_params, not all waited for
};

}  // namespace strata::inline kit_v3
