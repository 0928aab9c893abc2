#pragma once
/// \file plan.hpp
/// A strategy of the kit as data: what is sharded over the mesh's shard dimension, how gradients
/// are synchronized, and, unit by unit, what a unit's parameters are resharded to after its
/// forward. strata::Engine (engine.hpp) runs any plan; the built-in strategies are plans plus
/// options:
///
///   strategy              sharded       shard_size  reduce   after a unit's forward
///   single, dp, local_sgd kNothing      1           no       -
///   ddp                   kNothing      1           yes      -
///   zero1 / zero2         kOptimizer / kGradients   0 (all)  yes  -
///   zero3, FULL_SHARD     kParameters   0 (all)     yes      kShardGroup (the last unit: kNone)
///   SHARD_GRAD_OP         kParameters   0 (all)     yes      kNone (stay gathered until backward)
///   NO_SHARD              kParameters   1           yes      kNone
///   HYBRID_SHARD          kParameters   k           yes      kShardGroup
///   hpz (ZeRO++ hpZ)      kParameters   0 (all)     yes      kSubgroup (a copy sharded in a host)
///
/// The mesh: shard groups of `shard_size` consecutive ranks, replicated across groups (mesh.hpp).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <torch/types.h>

#include "strata/codec.hpp"
#include "strata/kit.hpp"
#include "strata/registry.hpp"
#include "strata/schedule.hpp"

namespace strata::inline kit_v3 {

/// What is sharded over the shard group (ZeRO's stages). Everything not sharded is replicated.
enum class Sharded {
  kNothing,     ///< full replicas (ddp's gradients all-reduced over the replicate group)
  kOptimizer,   ///< masters and optimizer state (zero1): full gradients reduce-scattered once a step
  kGradients,   ///< masters, optimizer state and gradients (zero2): reduce-scattered every micro-batch
  kParameters,  ///< everything, per model unit (zero3, fsdp): units gathered around their use
};

/// What a unit's gathered parameters become after its forward (kParameters).
enum class Reshard {
  kNone,        ///< stay gathered until the end of the unit's backward (SHARD_GRAD_OP)
  kShardGroup,  ///< freed; backward gathers them again over the shard group (FULL_SHARD)
  kSubgroup,    ///< freed, keeping a copy sharded over a sub-group of the shard group, which
                ///< backward gathers from (ZeRO++ hpZ: the backward all-gather stays in a host)
};

/// What a unit's gathered parameters become after its forward, as one value: FSDP2's
/// `reshard_after_forward: bool | int`.
///   ReshardTo::none()         False: they stay gathered until the end of its backward (SHARD_GRAD_OP)
///   ReshardTo::shard_group()  True: freed; backward gathers them again over the shard group (FULL_SHARD)
///   ReshardTo::ranks(k)       k: freed, keeping a copy sharded over sub-groups of k ranks, which
///                             backward gathers from (ZeRO++ hpZ); 0: the ranks of one host. k must
///                             divide the shard group; 1 keeps the whole unit (as none()).
/// It reads as its Reshard kind (`after_forward == Reshard::kNone`, `switch (after_forward)`).
struct ReshardTo {
  Reshard kind = Reshard::kShardGroup;
  int ranks = 0;  ///< kSubgroup: the sub-group's ranks (0: the ranks of one host)

  ReshardTo() = default;
  ReshardTo(Reshard k, int r = 0) : kind(k), ranks(r) {}  // NOLINT: a kind is a target
  static ReshardTo none() { return {Reshard::kNone}; }
  static ReshardTo shard_group() { return {Reshard::kShardGroup}; }
  static ReshardTo subgroups_of(int ranks) { return {Reshard::kSubgroup, ranks}; }
  operator Reshard() const { return kind; }  // NOLINT
};

/// The plan of one unit (Plan::unit may set it per unit).
struct UnitPlan {
  ReshardTo after_forward;
};

/// Where a rank's optimizer runs (ZeRO-Offload, FSDP2's CPUOffloadPolicy for the optimizer).
enum class Offload {
  kNone,       ///< on the device, over the masters
  kOptimizer,  ///< on the host: float32 copies of the owned masters and the optimizer state live in
               ///< host memory (pinned where the device is a GPU), the gradients go to the host
               ///< at the step and the updated masters come back to the device
};

/// The strategy option that selects it, `offload = "none" | "optimizer"` (OffloadOption::add
/// puts it in a schema, ::of reads it).
struct OffloadOption {
  template <class Schema, class Member>
  static void add(Schema& schema, Member member) {
    schema.option("offload", member,
                  "where the optimizer runs: \"optimizer\" keeps the owned float32 masters and the optimizer "
                  "state in host memory and steps there (the device keeps parameters, gradients and its master "
                  "copy); \"none\": on the device",
                  strata::one_of({"none", "optimizer"}));
  }
  static Offload of(const std::string& value) { return value == "optimizer" ? Offload::kOptimizer : Offload::kNone; }
  /// The option-matrix row that tests it (StrategyTraits::option_matrix).
  static OptionRow matrix_row() { return {"optimizer offload", {{"offload", "\"optimizer\""}}}; }
};

struct Plan {
  std::string owner = "strategy";  ///< the strategy's name, for messages
  Sharded sharded = Sharded::kNothing;
  /// Ranks per shard group (the mesh): 0 = every rank, 1 = none (replicas), k: HYBRID_SHARD.
  int shard_size = 0;
  /// The strategy option `shard_size` came from, named in errors.
  std::string shard_option = "shard_group_size";
  /// Average gradients over the replicate group (and reduce-scatter over the shard group); false
  /// keeps every rank's gradients its own (single, dp, local_sgd), accumulated in float32.
  bool reduce = true;

  // ---- layout
  /// Replicated parameters: flat groups (gradient buckets) of about this many bytes, in reverse
  /// parameter order. kParameters: a unit larger than this is cut into several groups (0: one
  /// group per unit).
  std::int64_t group_bytes = 25 * 1024 * 1024;

  // ---- communication
  /// Launch reductions from the grad-ready hooks during backward (false: after backward).
  bool overlap = true;
  /// kGradients/kParameters: ready groups reduce-scattered together up to this many bytes (0:
  /// each alone).
  std::int64_t reduce_coalesce_bytes = 0;
  /// Reductions whose buffers may be alive at once; 0: every group (the gradients are persistent
  /// buffers anyway: ddp, zero1).
  int reductions_in_flight = 2;
  /// kOptimizer/kGradients: after the step, consecutive groups all-gathered together up to this
  /// many bytes through a staging buffer (0: each group in place).
  std::int64_t allgather_bytes = 0;
  /// kOptimizer/kGradients: the all-gathers that refresh the parameters after the step are issued
  /// in forward order and waited for by each unit's forward, for the groups holding that unit's
  /// parameters, so the next forward's first units overlap the later groups' gathers (false: every
  /// group is waited for before step() returns). A strategy that sets it and reads parameters in
  /// after_step() calls Engine::wait_params() first.
  bool wait_params_per_unit = false;
  /// kParameters: units whose all-gather is issued ahead of use in forward, and in backward.
  int forward_prefetch = 1;
  int backward_prefetch = 1;
  /// kParameters: every unit's plan, unless `unit` says otherwise for one.
  UnitPlan units;
  /// kParameters: the last unit stays gathered after its forward whatever its plan says. Only the
  /// loss runs between its forward and its backward, so freeing it would start backward with an
  /// all-gather of it that nothing can hide (FSDP2 leaves the root unsharded after forward).
  bool keep_last_unit_gathered = true;
  /// The strategy option a sub-group size came from, named in errors.
  std::string subgroup_option = "subgroup_size";
  /// kParameters: how units travel when gathered (codec.hpp), over the shard group and from a
  /// sub-group copy; empty: as they are. The engine makes one codec of it, and the schedule asks
  /// one for its wire bytes.
  std::function<std::unique_ptr<GatherCodec>()> gather_codec;
  /// kGradients/kParameters: how gradients travel when their shards are reduced (codec.hpp): an
  /// all-to-all of encoded rows in place of the reduce-scatter; empty: a reduce-scatter.
  std::function<std::unique_ptr<ReduceCodec>()> reduce_codec;
  /// With a reduce codec: the all-to-all runs inside sub-groups of this many consecutive ranks of
  /// the shard group first, then across them (ZeRO++ qgZ: inside a host, then between hosts); 0:
  /// the ranks of one host; 1 or the shard group's size: one all-to-all over the shard group. Named
  /// in errors as `subgroup_option`.
  int reduce_subgroup = 1;
  /// Optional: the plan of unit `index` (named `name`), starting from `units`.
  std::function<void(std::size_t index, const std::string& name, UnitPlan& plan)> unit;

  // ---- the step
  /// Sharded plans (kOptimizer, kGradients, kParameters): where the optimizer runs. The schedule
  /// then reports the host's share as model state `host_masters` and `host_optimizer`.
  Offload offload = Offload::kNone;

  // ---- gradients that do not arrive
  /// A parameter without a gradient in a step counts as zero (ddp's find_unused_parameters);
  /// false: an error naming it.
  bool allow_missing = false;
  /// The fix named in that error.
  std::string missing_fix = "every trainable parameter must take part in every forward";
};

/// The plan of a strategy whose units are sharded (Sharded::kParameters) over shard groups of
/// `shard_size` ranks (0: every rank; 1: none, the units replicated and their gradients
/// all-reduced), each unit resharded to `reshard` after its forward. FSDP's sharding strategies and
/// ZeRO++'s hpZ are its presets:
///   FULL_SHARD, zero3   sharded_plan(owner, 0, ReshardTo::shard_group())
///   SHARD_GRAD_OP       sharded_plan(owner, 0, ReshardTo::none())
///   NO_SHARD            sharded_plan(owner, 1, ReshardTo::none())
///   HYBRID_SHARD        sharded_plan(owner, k, ReshardTo::shard_group())
///   hpZ                 sharded_plan(owner, 0, ReshardTo::subgroups_of(g))
/// The rest (buckets, prefetch, reductions in flight, a gather codec) the caller sets.
inline Plan sharded_plan(std::string owner, int shard_size, ReshardTo reshard) {
  Plan plan;
  plan.owner = std::move(owner);
  plan.sharded = Sharded::kParameters;
  plan.shard_size = shard_size;
  plan.units.after_forward = reshard;
  return plan;
}

/// The step the engine runs for `plan` as the host reads it (strata/schedule.hpp): the collectives
/// it issues, in order, over which groups, with their bytes, and what a rank holds (schedule.cpp).
/// What `strata check` holds a run of the plan to and `strata estimate` simulates.
Schedule schedule(const Plan& plan, const ScheduleInput& input);

/// The step of a local-update strategy (local SGD, DiLoCo): a replica's step that does not
/// communicate (schedule() of a plan with `reduce = false`), then, after every `every`-th optimizer
/// step and after the run's last one (Strategy::finish_training), one all-reduce of the float32
/// parameters' size, named `what`. Its steady state (ScheduleInput::kSteady, what `strata estimate`
/// predicts) spreads that all-reduce over the `every` steps.
Schedule local_update_schedule(const ScheduleInput& input, std::int64_t every, const std::string& what);

/// Declares strategy `name` (added to `registry` before) a plan of the kit, so that the host
/// checks and estimates it from the schedule the engine runs: `plan_of(const T& options, const
/// Topology&)` returns the Plan its setup takes over (the same function, called with
/// topology_of(setup), engine.hpp).
template <class T, class F>
void add_plan(Registry& registry, const std::string& name, const Schema<T>& schema, F plan_of) {
  registry.set_schedule(name, schema, [plan_of](const T& options, const ScheduleInput& input) {
    return schedule(plan_of(options, input.topology), input);
  });
}

}  // namespace strata::inline kit_v3
