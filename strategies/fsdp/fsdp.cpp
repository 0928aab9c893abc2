// `fsdp`: fully sharded data parallel (Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully
// Sharded Data Parallel", VLDB 2023). Each model unit is one flat parameter (FSDP's
// FlatParameter), sharded over a group of ranks by the kit's engine (a kParameters plan): gathered
// just before the unit runs, freed after, gradients reduce-scattered as each unit's backward completes.
//
// sharding_strategy:
//   FULL_SHARD     parameters, gradients and optimizer state sharded over all ranks; a unit is
//                  freed after its forward and gathered again for its backward (~3 Psi traffic;
//                  the last unit stays gathered, as its backward follows at once)
//   SHARD_GRAD_OP  as FULL_SHARD, but a unit stays gathered from its forward to the end of its
//                  backward (reshard_after_forward = false; ~2 Psi traffic, more memory)
//   NO_SHARD       every rank holds everything; gradients are all-reduced (DDP's traffic)
//   HYBRID_SHARD   FULL_SHARD inside groups of `shard_group_size` consecutive ranks, gradient
//                  shards averaged across the groups (all-reduce between replicas)

#include <fmt/format.h>

#include <strata/plan_strategy.hpp>
#include <strata/plugin.hpp>

namespace {

struct FsdpOptions {
  std::string sharding_strategy = "FULL_SHARD";  ///< FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD
  std::int64_t shard_group_size = 0;             ///< HYBRID_SHARD: ranks per shard group; 0 = ranks per host
  bool reshard_after_forward = true;             ///< FULL_SHARD/HYBRID_SHARD: free units after forward
  bool forward_prefetch = true;                  ///< issue the next unit's all-gather during forward
  bool backward_prefetch = true;                 ///< issue the previous unit's all-gather during backward
  std::int64_t reductions_in_flight = 2;         ///< reduce-scatters whose buffers are alive at once
  std::string offload = "none";                  ///< "optimizer": the optimizer steps on the host
};

/// Every sharding strategy is a plan over a mesh: which ranks shard a unit (all, one, or groups
/// of shard_group_size) and whether a unit is freed after its forward.
strata::Plan fsdp_plan(const FsdpOptions& o, const strata::Topology& t) {
  // The presets of strata::sharded_plan (plan.hpp): a shard group and what a unit is resharded to.
  const auto& how = o.sharding_strategy;
  const int shard = how == "NO_SHARD"       ? 1
                    : how == "HYBRID_SHARD" ? static_cast<int>(o.shard_group_size > 0 ? o.shard_group_size : t.local_world_size)
                                            : 0;
  const bool reshard = how != "SHARD_GRAD_OP" && how != "NO_SHARD" && o.reshard_after_forward;
  strata::Plan plan = strata::sharded_plan("fsdp " + how, shard, reshard ? strata::ReshardTo::shard_group() : strata::ReshardTo::none());
  plan.group_bytes = 0;  // one flat parameter per unit
  plan.forward_prefetch = o.forward_prefetch ? 1 : 0;
  plan.backward_prefetch = o.backward_prefetch ? 1 : 0;
  plan.reductions_in_flight = static_cast<int>(o.reductions_in_flight);
  plan.offload = strata::OffloadOption::of(o.offload);
  return plan;
}

void register_fsdp(strata::Registry& registry) {
  strata::Schema<FsdpOptions> schema;
  schema
      .option("sharding_strategy", &FsdpOptions::sharding_strategy, "what is sharded, and over which ranks",
              strata::one_of({"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"}))
      .option("shard_group_size", &FsdpOptions::shard_group_size,
              "HYBRID_SHARD: consecutive ranks per shard group; 0 = the ranks on one host", strata::at_least(0))
      .option("reshard_after_forward", &FsdpOptions::reshard_after_forward,
              "FULL_SHARD/HYBRID_SHARD: free a unit's parameters after its forward (false: after its backward)")
      .option("forward_prefetch", &FsdpOptions::forward_prefetch, "gather the next unit while one runs forward")
      .option("backward_prefetch", &FsdpOptions::backward_prefetch,
              "gather the previous unit while one runs backward")
      .option("reductions_in_flight", &FsdpOptions::reductions_in_flight,
              "gradient reduce-scatters whose buffers may be alive at once (bounds gradient memory in backward)",
              strata::at_least(1));
  strata::OffloadOption::add(schema, &FsdpOptions::offload);
  // FULL_SHARD is the default; `strata check fsdp` runs the other three too.
  strata::add_plan_strategy(registry, "fsdp",
                            "FSDP: per-unit flat parameters sharded (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD)",
                            schema, fsdp_plan,
                            strata::StrategyTraits{strata::Placement::rank_per_device(),
                                                   {},
                                                   {{"SHARD_GRAD_OP", {{"sharding_strategy", "\"SHARD_GRAD_OP\""}}},
                                                    {"NO_SHARD", {{"sharding_strategy", "\"NO_SHARD\""}}},
                                                    {"HYBRID_SHARD over 2", {{"sharding_strategy", "\"HYBRID_SHARD\""},
                                                                             {"shard_group_size", "2"}}},
                                                    strata::OffloadOption::matrix_row()}});
}

}  // namespace

STRATA_PLUGIN(strategy, "fsdp", "0.1.0", register_fsdp)
