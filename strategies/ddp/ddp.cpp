// `ddp`: distributed data parallel (Li et al., "PyTorch Distributed: Experiences on Accelerating
// Data Parallel Training", VLDB 2020). Every rank holds a full replica; parameters are broadcast
// from rank 0 at setup; gradients live in flat buckets (reverse parameter order, about
// `bucket_cap_mb` each) whose all-reduce (average) starts asynchronously from autograd hooks as
// soon as the bucket's last gradient is accumulated, overlapping the rest of backward. Only the
// last micro-batch of an accumulation communicates (no_sync for the others); gradients accumulate
// in float32 whatever the parameter dtype. As a plan (kit/include/strata/plan.hpp): nothing
// sharded, every rank a replica, gradients reduced.
//
// A parameter without a gradient in a step is an error naming it, unless find_unused_parameters:
// then it counts as a zero gradient, as in `single`, whose flat buffers hold zeros for it (its
// optimizer state and weight decay advance like every other parameter's).

#include <fmt/format.h>

#include <strata/plan_strategy.hpp>
#include <strata/plugin.hpp>

namespace {

struct DdpOptions {
  double bucket_cap_mb = 25.0;          ///< gradient bucket size, in MiB
  bool find_unused_parameters = false;  ///< tolerate parameters that get no gradient in a step
};

strata::Plan ddp_plan(const DdpOptions& o, const strata::Topology&) {
  strata::Plan plan;
  plan.owner = "ddp";
  plan.group_bytes = static_cast<std::int64_t>(o.bucket_cap_mb * 1024 * 1024);
  plan.reductions_in_flight = 0;  // the buckets are the gradient buffers themselves: nothing to bound
  plan.allow_missing = o.find_unused_parameters;
  plan.missing_fix = "Set `find_unused_parameters = true` in [strategy] if the model legitimately skips them.";
  return plan;
}

void register_ddp(strata::Registry& registry) {
  strata::Schema<DdpOptions> schema;
  schema.option("bucket_cap_mb", &DdpOptions::bucket_cap_mb, "gradient bucket size in MiB", strata::positive())
      .option("find_unused_parameters", &DdpOptions::find_unused_parameters,
              "allow parameters without a gradient in a step (they count as zero)");
  strata::add_plan_strategy(registry, "ddp",
                            "distributed data parallel: replicas, bucketed all-reduce overlapped with backward", schema,
                            ddp_plan);
}

}  // namespace

STRATA_PLUGIN(strategy, "ddp", "0.1.0", register_ddp)
