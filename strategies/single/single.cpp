// `single`: the baseline every other strategy is compared with and must reproduce. One process,
// one device, a plain optimizer step; no communication: the engine's replicated plan with local
// gradients (strata::Engine, kit/include/strata/engine.hpp).

#include <strata/plan_strategy.hpp>
#include <strata/plugin.hpp>

namespace {

/// `single` has no options; the struct exists so `strata describe single` and validation work
/// like for every other plugin.
struct SingleOptions {};

/// Replicas of one rank whose gradients stay local.
strata::Plan single_plan(const SingleOptions&, const strata::Topology&) {
  strata::Plan plan;
  plan.owner = "single";
  plan.reduce = false;
  return plan;
}

void register_single(strata::Registry& registry) {
  const strata::Schema<SingleOptions> schema;
  strata::add_plan_strategy(registry, "single", "one process, one device: the baseline (no communication)", schema,
                            single_plan, strata::Placement::one_device());
}

}  // namespace

STRATA_PLUGIN(strategy, "single", "0.1.0", register_single)
