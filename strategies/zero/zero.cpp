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
// zero3: parameters are sharded too, per model unit (strata/unit_shards.hpp): a unit is gathered
//          just before its forward and again before its backward, freed right after each;
//          gradients are reduce-scattered as each unit's backward completes. A unit larger than
//          `allgather_bucket_mb` is gathered in several flat groups; ready groups are reduced
//          together up to `reduce_bucket_mb`; `prefetch` units are gathered ahead.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/types.h>

#include <strata/errors.hpp>
#include <strata/plugin.hpp>
#include <strata/replica.hpp>
#include <strata/sharded_strategy.hpp>
#include <strata/unit_shards.hpp>

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

/// zero1 and zero2.
struct ZeroOptions {
  double reduce_bucket_mb = 25.0;         ///< flat group (gradient reduce-scatter bucket) size, in MiB
  double allgather_bucket_mb = 0.0;       ///< groups all-gathered together per call, in MiB; 0: each in place
  bool overlap = true;                    ///< reduce-scatter from autograd hooks during backward
  std::int64_t reductions_in_flight = 2;  ///< zero2: reduce-scatters whose buffers are alive at once
};

/// zero3: the groups are cut from units, so both bucket sizes mean something else.
struct Zero3Options {
  double allgather_bucket_mb = 25.0;      ///< a unit larger than this is gathered in several groups, in MiB
  double reduce_bucket_mb = 1.0;          ///< ready groups reduce-scattered together up to this many MiB
  bool overlap = true;                    ///< reduce-scatter from autograd hooks during backward
  std::int64_t reductions_in_flight = 2;  ///< reduce-scatters whose buffers are alive at once
  std::int64_t prefetch = 1;              ///< units gathered ahead of use
};

class ZeroStrategy final : public strata::ReplicaStrategy {
 public:
  ZeroStrategy(ZeroOptions options, int stage) : options_(options), stage_(stage) {}

  void setup(const strata::StrategySetup& s) override {
    strata::ReplicaLayout layout;
    layout.bucket_cap_bytes = static_cast<std::int64_t>(options_.reduce_bucket_mb * kMiB);
    layout.shard = s.comm;
    layout.grads = stage_ == 1 ? strata::GradHolding::kFull : strata::GradHolding::kShard;
    take_over(s, layout);
    allgather_cap_bytes_ = static_cast<std::int64_t>(options_.allgather_bucket_mb * kMiB);
    strata::GradReducerOptions o;
    o.overlap = options_.overlap;
    // zero1 reduces its persistent buffers (only the chunk-sized outputs are transient).
    o.max_in_flight = stage_ == 1 ? static_cast<int>(groups_.size()) : static_cast<int>(options_.reductions_in_flight);
    o.owner = fmt::format("zero{}", stage_);
    o.missing_fix = "ZeRO requires every trainable parameter to get a gradient in every step.";
    reduce_gradients(std::move(o));
    std::int64_t padding = 0;
    for (const auto& g : groups_) padding += g->padded() - g->numel();
    s.log->info(fmt::format("zero{}: {} parameters in {} buckets of <= {} MiB ({} padding elements), all-gather "
                            "<= {} MiB per call, overlap {}, world {}{}",
                            stage_, params_.size(), groups_.size(), options_.reduce_bucket_mb, padding,
                            options_.allgather_bucket_mb, options_.overlap, comm_->world_size(),
                            stage_ == 2 ? fmt::format(", {} reductions in flight", options_.reductions_in_flight)
                                        : std::string()));
  }

 private:
  ZeroOptions options_;
  int stage_;
};

class Zero3Strategy final : public strata::ShardedStrategy {
 public:
  explicit Zero3Strategy(Zero3Options options) : options_(options) {}

  void setup(const strata::StrategySetup& s) override {
    strata::UnitShardOptions o;
    o.group_cap_bytes = static_cast<std::int64_t>(options_.allgather_bucket_mb * kMiB);
    o.reduce_cap_bytes = static_cast<std::int64_t>(options_.reduce_bucket_mb * kMiB);
    o.reshard_after_forward = true;
    o.forward_prefetch = o.backward_prefetch = static_cast<int>(options_.prefetch);
    o.overlap = options_.overlap;
    o.reductions_in_flight = static_cast<int>(options_.reductions_in_flight);
    o.owner = "zero3";
    take_over(s, *s.comm, nullptr, o);
    s.log->info(fmt::format("zero3: {}; reduce buckets <= {} MiB, prefetch {}, overlap {}", shards_->describe(),
                            options_.reduce_bucket_mb, options_.prefetch, options_.overlap));
  }

 private:
  Zero3Options options_;
};

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
  registry.add_strategy("zero1", "ZeRO-1: optimizer state sharded, bucketed reduce-scatter + all-gather", schema1,
                        [](const ZeroOptions& o) { return std::make_shared<ZeroStrategy>(o, 1); },
                        strata::Footprint{strata::Footprint::Memory{false, false, true}, strata::Footprint::Traffic{2, 0}});
  registry.add_strategy("zero2", "ZeRO-2: optimizer state and gradients sharded", schema2,
                        [](const ZeroOptions& o) { return std::make_shared<ZeroStrategy>(o, 2); },
                        // A reduce-scatter per micro-batch, one all-gather per step.
                        strata::Footprint{strata::Footprint::Memory{false, true, true}, strata::Footprint::Traffic{1, 1}});
  registry.add_strategy("zero3", "ZeRO-3: parameters, gradients and optimizer state sharded, gathered per unit",
                        schema3, [](const Zero3Options& o) { return std::make_shared<Zero3Strategy>(o); },
                        strata::Footprint{strata::Footprint::Memory{true, true, true}, strata::Footprint::Traffic{0, 3}});
}

}  // namespace

STRATA_PLUGIN(strategy, "zero1,zero2,zero3", "0.1.0", register_zero)
