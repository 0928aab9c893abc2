// `hpz`: ZeRO++'s hierarchical partitioning of parameters (Wang et al., "ZeRO++: Extremely
// Efficient Collective Communication for Giant Model Training", 2023, section 3.2). Like zero3 /
// FSDP FULL_SHARD, every unit's parameters, gradients and optimizer state are sharded over all N
// ranks, and a unit is gathered from all of them for its forward. After its forward, though, a
// rank keeps a secondary copy of the unit sharded over its host (a sub-group of g consecutive
// ranks: 1/g of the unit instead of 1/N), and backward gathers the unit back from the sub-group
// only, so that all-gather never leaves the host. Gradients are reduce-scattered over all ranks.
//
//   per micro-batch   forward all-gather over N     (N-1)/N x P
//                     backward all-gather over g    (g-1)/g x P   (intra-host)
//                     reduce-scatter over N         (N-1)/N x P
//   memory            1/N of parameters, gradients and optimizer state between steps, plus 1/g of
//                     every unit between its forward and its backward
//
// The whole strategy is a plan for the kit's engine (strata/engine.hpp, strata/plan.hpp): sharded
// parameters, and units resharded to a sub-group after forward. With g = 1 every rank keeps its
// units whole until their backward (SHARD_GRAD_OP's memory and traffic); with g = N it moves
// FULL_SHARD's bytes. g must divide N.

#include <string>

#include <strata/plan_strategy.hpp>
#include <strata/plugin.hpp>

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct HpzOptions {
  std::int64_t secondary_group_size = 0;  ///< ranks holding a unit's secondary copy; 0 = the ranks of one host
  double allgather_bucket_mb = 25.0;      ///< a unit larger than this is gathered in several groups, in MiB
  double reduce_bucket_mb = 1.0;          ///< ready groups reduce-scattered together up to this many MiB
  std::int64_t reductions_in_flight = 2;  ///< reduce-scatters whose buffers are alive at once
  std::int64_t prefetch = 1;              ///< units gathered ahead of use, in forward and in backward
  std::string offload = "none";           ///< "optimizer": the optimizer steps on the host
};

strata::Plan hpz_plan(const HpzOptions& o, const strata::Topology&) {
  // Sharded over every rank; after its forward a unit keeps a copy over sub-groups of
  // secondary_group_size ranks (0: the mesh takes the ranks of one host).
  strata::Plan plan = strata::sharded_plan("hpz", 0, strata::ReshardTo::subgroups_of(static_cast<int>(o.secondary_group_size)));
  plan.subgroup_option = "secondary_group_size";
  plan.group_bytes = static_cast<std::int64_t>(o.allgather_bucket_mb * kMiB);
  plan.reduce_coalesce_bytes = static_cast<std::int64_t>(o.reduce_bucket_mb * kMiB);
  plan.forward_prefetch = plan.backward_prefetch = static_cast<int>(o.prefetch);
  plan.reductions_in_flight = static_cast<int>(o.reductions_in_flight);
  plan.offload = strata::OffloadOption::of(o.offload);
  return plan;
}

void register_hpz(strata::Registry& registry) {
  strata::Schema<HpzOptions> schema;
  schema
      .option("secondary_group_size", &HpzOptions::secondary_group_size,
              "ranks (consecutive, dividing the world size) over which a unit's secondary copy is sharded between "
              "its forward and its backward, which gathers from them; 0 = the ranks of one host",
              strata::at_least(0))
      .option("allgather_bucket_mb", &HpzOptions::allgather_bucket_mb,
              "a unit larger than this many MiB is gathered in several flat groups", strata::positive())
      .option("reduce_bucket_mb", &HpzOptions::reduce_bucket_mb,
              "ready groups reduce-scattered together up to this many MiB (0: each alone)", strata::at_least(0))
      .option("reductions_in_flight", &HpzOptions::reductions_in_flight,
              "gradient reduce-scatters whose buffers may be alive at once", strata::at_least(1))
      .option("prefetch", &HpzOptions::prefetch, "units whose all-gather is issued ahead of use (0: none)",
              strata::at_least(0));
  strata::OffloadOption::add(schema, &HpzOptions::offload);
  // The default sub-group is the host, which on one host is every rank: the check runs sub-groups
  // of 1 and 2 ranks too (a row is skipped at a world size it does not divide). The engine runs
  // the plan; `strata check` and `strata estimate` read its schedule.
  strata::add_plan_strategy(registry, "hpz",
                            "ZeRO++ hpZ: zero3 whose backward all-gather comes from a secondary shard inside the host",
                            schema, hpz_plan,
                            strata::StrategyTraits{strata::Placement::rank_per_device(),
                                                   {},
                                                   {{"sub-groups of 1", {{"secondary_group_size", "1"}}},
                                                    {"sub-groups of 2", {{"secondary_group_size", "2"}}},
                                                    strata::OffloadOption::matrix_row()}});
}

}  // namespace

STRATA_PLUGIN(strategy, "hpz", "0.1.0", register_hpz)
