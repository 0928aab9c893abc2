#include "strata/plan.hpp"

namespace strata::inline kit_v2 {

namespace {
PlanOutline::Unit outline_unit(const UnitPlan& u) {
  return {static_cast<PlanOutline::Reshard>(u.after_forward), u.subgroup_size};
}
UnitPlan unit_plan(const PlanOutline::Unit& u) { return {static_cast<Reshard>(u.after_forward), u.subgroup_size}; }
}  // namespace

// The enums are the same lists in the same order.
static_assert(static_cast<int>(PlanOutline::Sharded::kParameters) == static_cast<int>(Sharded::kParameters));
static_assert(static_cast<int>(PlanOutline::Reshard::kSubgroup) == static_cast<int>(Reshard::kSubgroup));

PlanOutline outline(const Plan& plan) {
  PlanOutline o;
  o.owner = plan.owner;
  o.sharded = static_cast<PlanOutline::Sharded>(plan.sharded);
  o.shard_size = plan.shard_size;
  o.reduce = plan.reduce;
  o.group_bytes = plan.group_bytes;
  o.overlap = plan.overlap;
  o.reduce_coalesce_bytes = plan.reduce_coalesce_bytes;
  o.reductions_in_flight = plan.reductions_in_flight;
  o.allgather_bytes = plan.allgather_bytes;
  o.wait_params_per_unit = plan.wait_params_per_unit;
  o.forward_prefetch = plan.forward_prefetch;
  o.backward_prefetch = plan.backward_prefetch;
  o.units = outline_unit(plan.units);
  o.keep_last_unit_gathered = plan.keep_last_unit_gathered;
  if (plan.unit)
    o.unit = [unit = plan.unit](std::size_t index, const std::string& name, PlanOutline::Unit& u) {
      UnitPlan p = unit_plan(u);
      unit(index, name, p);
      u = outline_unit(p);
    };
  return o;
}

}  // namespace strata::inline kit_v2
