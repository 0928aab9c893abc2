#pragma once
/// \file plan_strategy.hpp
/// A strategy that is its plan, the shape of single, ddp, zero1-3, fsdp, hpz and zeropp: options, a
/// schema and a plan function, registered by one call. The engine runs the plan the function makes
/// for the job's topology; the host reads the schedule of the same plan (add_plan, plan.hpp).
///
///   strata::add_plan_strategy(registry, "hpz", "ZeRO++ hpZ: ...", schema, hpz_plan, traits);

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "strata/engine.hpp"
#include "strata/kit.hpp"
#include "strata/plan.hpp"

namespace strata::inline kit_v3 {

/// Runs the plan `plan_of` makes for the job's topology, and logs its layout.
class PlanStrategy final : public Engine {
 public:
  explicit PlanStrategy(std::function<Plan(const Topology&)> plan_of) : plan_of_(std::move(plan_of)) {}
  void setup(const StrategySetup& s) override {
    take_over(s, plan_of_(topology_of(s)));
    s.log->info(plan_.owner + ": " + describe());
  }

 private:
  std::function<Plan(const Topology&)> plan_of_;
};

/// Adds strategy `name`, which is its plan: `plan_of(const T& options, const Topology&)` returns
/// it (a pure function: also called by the host, without building anything, for the schedule).
template <class T, class F>
void add_plan_strategy(Registry& registry, const std::string& name, std::string description, const Schema<T>& schema,
                       F plan_of, StrategyTraits traits = {}) {
  registry.add_strategy(
      name, std::move(description), schema,
      [plan_of](const T& options) {
        return std::make_shared<PlanStrategy>([plan_of, options](const Topology& t) { return plan_of(options, t); });
      },
      std::move(traits));
  add_plan(registry, name, schema, plan_of);
}

}  // namespace strata::inline kit_v3
