// `fsdp`: fully sharded data parallel (Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully
// Sharded Data Parallel", VLDB 2023). Each model unit is one flat parameter (FSDP's
// FlatParameter), sharded over a group of ranks by strata::UnitShards: gathered just before the
// unit runs, freed after, gradients reduce-scattered as each unit's backward completes.
//
// sharding_strategy:
//   FULL_SHARD     parameters, gradients and optimizer state sharded over all ranks; a unit is
//                  freed after its forward and gathered again for its backward (~3 Psi traffic)
//   SHARD_GRAD_OP  as FULL_SHARD, but a unit stays gathered from its forward to the end of its
//                  backward (reshard_after_forward = false; ~2 Psi traffic, more memory)
//   NO_SHARD       every rank holds everything; gradients are all-reduced (DDP's traffic)
//   HYBRID_SHARD   FULL_SHARD inside groups of `shard_group_size` consecutive ranks, gradient
//                  shards averaged across the groups (all-reduce between replicas)

#include <fmt/format.h>

#include <strata/errors.hpp>
#include <strata/plugin.hpp>
#include <strata/sharded_strategy.hpp>

namespace {

struct FsdpOptions {
  std::string sharding_strategy = "FULL_SHARD";  ///< FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD
  std::int64_t shard_group_size = 0;             ///< HYBRID_SHARD: ranks per shard group; 0 = ranks per host
  bool reshard_after_forward = true;             ///< FULL_SHARD/HYBRID_SHARD: free units after forward
  bool forward_prefetch = true;                  ///< issue the next unit's all-gather during forward
  bool backward_prefetch = true;                 ///< issue the previous unit's all-gather during backward
  std::int64_t reductions_in_flight = 2;         ///< reduce-scatters whose buffers are alive at once
};

class FsdpStrategy final : public strata::ShardedStrategy {
 public:
  explicit FsdpStrategy(FsdpOptions options) : options_(std::move(options)) {}

  void setup(const strata::StrategySetup& s) override {
    const int world = s.comm->world_size();
    const int rank = s.comm->rank();
    const auto& how = options_.sharding_strategy;
    strata::UnitShardOptions o;
    o.reshard_after_forward = how != "SHARD_GRAD_OP" && how != "NO_SHARD" && options_.reshard_after_forward;
    o.forward_prefetch = options_.forward_prefetch ? 1 : 0;
    o.backward_prefetch = options_.backward_prefetch ? 1 : 0;
    o.reductions_in_flight = static_cast<int>(options_.reductions_in_flight);
    o.owner = "fsdp";
    strata::Comm* shard = s.comm;
    strata::Comm* replicate = nullptr;
    if (how == "NO_SHARD") {
      local_ = strata::make_local_comm(s.device);
      shard = local_.get();
      replicate = s.comm;
    } else if (how == "HYBRID_SHARD") {
      const int size = options_.shard_group_size > 0 ? static_cast<int>(options_.shard_group_size) : s.local_world_size;
      if (size < 1 || world % size != 0)
        throw strata::Error(fmt::format("fsdp: HYBRID_SHARD needs a shard group size that divides the world size {}; "
                                        "[strategy] shard_group_size is {}",
                                        world, size),
                            "Set shard_group_size to a divisor of the number of ranks (the ranks per host by default).");
      std::vector<int> shard_ranks, replica_ranks;
      for (int r = rank / size * size; r < (rank / size + 1) * size; ++r) shard_ranks.push_back(r);
      for (int r = rank % size; r < world; r += size) replica_ranks.push_back(r);
      // Every rank creates its shard group first, then its replica group (the same order everywhere).
      shard_group_ = s.comm->subgroup(shard_ranks);
      replica_group_ = s.comm->subgroup(replica_ranks);
      shard = shard_group_.get();
      replicate = replica_group_.get();
    }
    take_over(s, *shard, replicate, o);
    s.log->info(fmt::format("fsdp {}: {}; reshard_after_forward {}, prefetch forward {} backward {}", how,
                            shards_->describe(), o.reshard_after_forward, options_.forward_prefetch,
                            options_.backward_prefetch));
  }

 private:
  FsdpOptions options_;
  std::unique_ptr<strata::Comm> local_;
  std::shared_ptr<strata::Comm> shard_group_;
  std::shared_ptr<strata::Comm> replica_group_;
};

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
  registry.add_strategy("fsdp", "FSDP: per-unit flat parameters sharded (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
                                "HYBRID_SHARD)",
                        schema, [](const FsdpOptions& o) { return std::make_shared<FsdpStrategy>(o); },
                        // FULL_SHARD, the default: everything sharded, two gathers and a reduce-scatter per micro-batch.
                        strata::Footprint{strata::Footprint::Memory{true, true, true}, strata::Footprint::Traffic{0, 3}});
}

}  // namespace

STRATA_PLUGIN(strategy, "fsdp", "0.1.0", register_fsdp)
