// `zero1`, `zero2`, `zero3`: the ZeRO stages (Rajbhandari, Rasley, Ruwase, He, "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", SC 2020 / arXiv:1910.02054, 2019).
//
// zero1 and zero2: every rank holds the full parameters, in flat groups (strata::FlatGroup,
// reverse parameter order, about `reduce_bucket_mb` each, padded to a multiple of the world size);
// rank r owns chunk r of every group: its float32 master and that master's optimizer state. At
// the step the owned chunks are updated and the parameters all-gathered: each group in place by
// default, or consecutive groups together up to `allgather_bucket_mb` per call.
//   zero1: gradients accumulate over the micro-batches in a persistent full float32 buffer per
//          group; after the last micro-batch, each group's buffer is reduce-scattered (average)
//          from the grad hooks as soon as it is complete (`overlap`; otherwise after backward),
//          its owned chunk becoming the master's gradient. Optimizer state sharded.
//   zero2: only the owned gradient chunk persists. After every micro-batch each group's
//          gradients are staged, reduce-scattered into it and released, at most
//          `reductions_in_flight` at a time, so gradient memory stays 1/N during backward too.
//          Gradients and optimizer state sharded.
// zero3: parameters are sharded too, per model unit (strata::Sharded::kParameters): a unit is gathered
//          just before its forward and again before its backward, freed right after each;
//          gradients are reduce-scattered as each unit's backward completes. A unit larger than
//          `allgather_bucket_mb` is gathered in several flat groups; ready groups are reduced
//          together up to `reduce_bucket_mb`; `prefetch` units are gathered ahead.

#include <fmt/format.h>

#include <strata/plan_strategy.hpp>
#include <strata/plugin.hpp>

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

/// zero1 and zero2.
struct ZeroOptions {
  double reduce_bucket_mb = 25.0;         ///< flat group (gradient reduce-scatter bucket) size, in MiB
  double allgather_bucket_mb = 0.0;       ///< groups all-gathered together per call, in MiB; 0: each in place
  bool overlap = true;                    ///< reduce-scatter from autograd hooks during backward
  std::int64_t reductions_in_flight = 2;  ///< zero2: reduce-scatters whose buffers are alive at once
  std::string offload = "none";           ///< "optimizer": the optimizer steps on the host (strata/offload.hpp)
};

/// zero3: the groups are cut from units, so both bucket sizes mean something else.
struct Zero3Options {
  double allgather_bucket_mb = 25.0;      ///< a unit larger than this is gathered in several groups, in MiB
  double reduce_bucket_mb = 1.0;          ///< ready groups reduce-scattered together up to this many MiB
  bool overlap = true;                    ///< reduce-scatter from autograd hooks during backward
  std::int64_t reductions_in_flight = 2;  ///< reduce-scatters whose buffers are alive at once
  std::int64_t prefetch = 1;              ///< units gathered ahead of use
  std::string offload = "none";           ///< "optimizer": the optimizer steps on the host (strata/offload.hpp)
};

strata::Plan zero_plan(const ZeroOptions& o, int stage) {  // the same at every topology
  strata::Plan plan;
  plan.owner = fmt::format("zero{}", stage);
  plan.sharded = stage == 1 ? strata::Sharded::kOptimizer : strata::Sharded::kGradients;
  plan.group_bytes = static_cast<std::int64_t>(o.reduce_bucket_mb * kMiB);
  plan.allgather_bytes = static_cast<std::int64_t>(o.allgather_bucket_mb * kMiB);
  plan.overlap = o.overlap;
  // zero1 reduces its persistent buffers (only the chunk-sized outputs are transient).
  plan.reductions_in_flight = stage == 1 ? 0 : static_cast<int>(o.reductions_in_flight);
  plan.wait_params_per_unit = true;  // the next forward's first units overlap the later groups' all-gathers
  plan.missing_fix = "ZeRO requires every trainable parameter to get a gradient in every step.";
  plan.offload = strata::OffloadOption::of(o.offload);
  return plan;
}

strata::Plan zero3_plan(const Zero3Options& o) {
  strata::Plan plan = strata::sharded_plan("zero3", 0, strata::ReshardTo::shard_group());
  plan.group_bytes = static_cast<std::int64_t>(o.allgather_bucket_mb * kMiB);
  plan.reduce_coalesce_bytes = static_cast<std::int64_t>(o.reduce_bucket_mb * kMiB);
  plan.forward_prefetch = plan.backward_prefetch = static_cast<int>(o.prefetch);
  plan.overlap = o.overlap;
  plan.reductions_in_flight = static_cast<int>(o.reductions_in_flight);
  plan.missing_fix = "ZeRO requires every trainable parameter to get a gradient in every step.";
  plan.offload = strata::OffloadOption::of(o.offload);
  return plan;
}

void register_zero(strata::Registry& registry) {
  strata::Schema<ZeroOptions> schema1;
  schema1
      .option("reduce_bucket_mb", &ZeroOptions::reduce_bucket_mb,
              "flat group size in MiB: each group's gradients are reduce-scattered in one call", strata::positive())
      .option("allgather_bucket_mb", &ZeroOptions::allgather_bucket_mb,
              "after the step, consecutive groups all-gathered in one call of up to this many MiB through a "
              "staging buffer of that size; 0: each group in place, in a call of its own",
              strata::at_least(0))
      .option("overlap", &ZeroOptions::overlap,
              "reduce-scatter gradients from autograd hooks during backward (false: after backward)");
  strata::OffloadOption::add(schema1, &ZeroOptions::offload);
  strata::Schema<ZeroOptions> schema2 = schema1;
  schema2.option("reductions_in_flight", &ZeroOptions::reductions_in_flight,
                 "gradient reduce-scatters whose buffers may be alive at once (bounds gradient memory in backward)",
                 strata::at_least(1));
  strata::Schema<Zero3Options> schema3;
  schema3
      .option("allgather_bucket_mb", &Zero3Options::allgather_bucket_mb,
              "a unit larger than this many MiB is gathered in several flat groups", strata::positive())
      .option("reduce_bucket_mb", &Zero3Options::reduce_bucket_mb,
              "ready groups reduce-scattered together up to this many MiB (0: each alone)", strata::at_least(0))
      .option("overlap", &Zero3Options::overlap,
              "reduce-scatter gradients from autograd hooks during backward (false: after backward)")
      .option("reductions_in_flight", &Zero3Options::reductions_in_flight,
              "gradient reduce-scatters whose buffers may be alive at once (bounds gradient memory in backward)",
              strata::at_least(1))
      .option("prefetch", &Zero3Options::prefetch, "units whose all-gather is issued ahead of use (0: none)",
              strata::at_least(0));
  strata::OffloadOption::add(schema3, &Zero3Options::offload);
  const auto offload = strata::OffloadOption::matrix_row();
  const auto stage = [](int k) { return [k](const ZeroOptions& o, const strata::Topology&) { return zero_plan(o, k); }; };
  strata::add_plan_strategy(registry, "zero1", "ZeRO-1: optimizer state sharded, bucketed reduce-scatter + all-gather",
                            schema1, stage(1),
                            strata::StrategyTraits{strata::Placement::rank_per_device(), {}, {offload}});
  strata::add_plan_strategy(registry, "zero2", "ZeRO-2: optimizer state and gradients sharded", schema2, stage(2),
                            strata::StrategyTraits{strata::Placement::rank_per_device(), {},
                                                   {{"all-gathers of 1 MiB", {{"allgather_bucket_mb", "1.0"}}}, offload}});
  strata::add_plan_strategy(registry, "zero3", "ZeRO-3: parameters, gradients and optimizer state sharded, gathered per unit",
                            schema3, [](const Zero3Options& o, const strata::Topology&) { return zero3_plan(o); },
                            strata::StrategyTraits{strata::Placement::rank_per_device(), {},
                                                   {{"no prefetch", {{"prefetch", "0"}}}, offload}});
}

}  // namespace

STRATA_PLUGIN(strategy, "zero1,zero2,zero3", "0.1.0", register_zero)
