// `zero1`, `zero2`, `zero3`: the ZeRO stages (Rajbhandari, Rasley, Ruwase, He, "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", SC 2020 / arXiv:1910.02054, 2019).
//
// zero1 and zero2: every rank holds the full parameters; they live in flat buckets
// (strata/flat_shard.hpp, reverse parameter order, about `reduce_bucket_mb` each, padded to a
// multiple of the world size), and rank r owns chunk r of every bucket. The optimizer (and its
// state) covers the owned chunks only, as float32 masters. At the last micro-batch, bucket hooks
// launch an asynchronous reduce-scatter (average) of each bucket's gradients as soon as the bucket
// is complete (`overlap`; otherwise all buckets after backward). After the optimizer step on the
// owned chunks, the parameters are all-gathered, consecutive buckets together up to
// `allgather_bucket_mb` per call.
//   zero1: gradients accumulate in persistent full-size flat buffers (the .grad are views); the
//          reduced owned chunk becomes the master's gradient. Optimizer state sharded.
//   zero2: gradients are autograd's own (transient) tensors; at the last micro-batch each bucket is
//          flattened into a transient buffer, reduce-scattered into a persistent owned-gradient
//          chunk, and the full gradients are released. Gradients and optimizer state sharded.
// zero3: parameters are sharded too, per model unit (strata/unit_shards.hpp): a unit is gathered
//          just before its forward and again before its backward, freed right after each;
//          gradients are reduce-scattered as each unit's backward completes. A unit larger than
//          `allgather_bucket_mb` is gathered in several flat groups; ready groups are reduced
//          together up to `reduce_bucket_mb`; `prefetch` units are gathered ahead.

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/types.h>

#include <strata/buckets.hpp>
#include <strata/errors.hpp>
#include <strata/flat_shard.hpp>
#include <strata/plugin.hpp>
#include <strata/replica.hpp>
#include <strata/sharded_strategy.hpp>
#include <strata/unit_shards.hpp>

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct ZeroOptions {
  double reduce_bucket_mb = 25.0;     ///< gradient reduce-scatter bucket, in MiB
  double allgather_bucket_mb = 25.0;  ///< parameter all-gather size per call, in MiB
  bool overlap = true;                ///< reduce-scatter from autograd hooks during backward
  std::int64_t prefetch = 1;          ///< zero3: units gathered ahead of use
};

class ZeroStrategy final : public strata::ReplicaStrategy {
 public:
  ZeroStrategy(ZeroOptions options, int stage) : options_(options), stage_(stage) {}

  void setup(const strata::StrategySetup& s) override {
    place(s);
    comm_ = s.comm;
    precision_ = s.precision;
    const int rank = comm_->rank();
    const int world = comm_->world_size();
    buckets_ = strata::build_sharded_buckets(params_, static_cast<std::int64_t>(options_.reduce_bucket_mb * kMiB),
                                             rank, world);
    const bool mixed = precision_.mixed();
    const auto wire = precision_.reduce;
    for (auto& b : buckets_) {
      torch::NoGradGuard no_grad;
      // The optimizer's leaf: the owned chunk itself, or its float32 master under a mixed policy
      // (then the replica is cast down and the parameters re-pointed into the cast buckets).
      auto master = mixed ? b.owned_params().clone() : b.owned_params().detach();
      if (mixed) {
        b.flat_params = b.flat_params.to(precision_.param);
        auto views = b.param_views(b.flat_params, params_);
        for (std::size_t k = 0; k < b.params.size(); ++k) params_[b.params[k]].set_data(views[k]);
      }
      master.set_requires_grad(true);
      if (stage_ == 1) {
        auto flat = torch::zeros({b.padded}, b.flat_params.options());
        auto views = b.param_views(flat, params_);
        for (std::size_t k = 0; k < b.params.size(); ++k) params_[b.params[k]].mutable_grad() = views[k];
        grad_flats_.push_back(flat);
        master.mutable_grad() = mixed ? torch::zeros_like(master) : b.chunk_of(flat, rank);
      } else {
        reduced_.push_back(torch::zeros({b.chunk}, b.flat_params.options().dtype(wire)));
        master.mutable_grad() = wire == torch::kFloat32 ? reduced_.back() : torch::zeros_like(master);
      }
      owned_.push_back(master);
    }
    if (mixed)
      for (auto& buffer : model_->buffers())
        if (buffer.is_floating_point()) buffer.set_data(buffer.to(precision_.param));
    optimizer_ = strata::make_optimizer(owned_, s.optimizer);

    works_.resize(buckets_.size());
    inputs_.resize(buckets_.size());
    transient_.resize(buckets_.size());
    std::vector<std::vector<std::size_t>> assignment;
    for (const auto& b : buckets_) assignment.push_back(b.params);
    schedule_ = strata::BucketSchedule(assignment, params_.size(), [this](std::size_t b) { launch(b); });
    for (std::size_t i = 0; i < params_.size(); ++i)
      hooks_.push_back(strata::add_grad_ready_hook(params_[i], [this, i] { schedule_.mark_ready(i); }));
    std::int64_t padding = 0;
    for (auto& b : buckets_) padding += b.padded - b.numel;
    s.log->info(fmt::format("zero{}: {} parameters in {} buckets of <= {} MiB ({} padding elements), all-gather "
                            "<= {} MiB per call, overlap {}, world {}",
                            stage_, params_.size(), buckets_.size(), options_.reduce_bucket_mb, padding,
                            options_.allgather_bucket_mb, options_.overlap, world));
  }

  torch::Tensor forward_backward(const strata::Batch& batch, strata::MicroStep micro) override {
    // Without overlap the hooks stay silent and finish_gradients launches every bucket.
    if (micro.last() && options_.overlap) schedule_.start_round();
    return replica_forward_backward(batch, micro);
  }

  double finish_gradients(double max_norm) override {
    if (!options_.overlap) {
      schedule_.start_round();
      for (std::size_t i = 0; i < params_.size(); ++i)
        if (params_[i].grad().defined()) schedule_.mark_ready(i);
    }
    if (!schedule_.all_launched()) {
      std::vector<std::string> unused;
      for (auto i : schedule_.missing()) unused.push_back(param_names_[i]);
      // Launched collectives must complete before throwing.
      for (std::size_t b = 0; b < schedule_.launched(); ++b) works_[b]->wait();
      throw strata::Error(fmt::format("zero{}: {} parameter(s) received no gradient in this step: {}.", stage_,
                                      unused.size(), fmt::join(unused, ", ")),
                          "ZeRO requires every trainable parameter to get a gradient in every step.");
    }
    schedule_.end_round();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      works_[b]->wait();
      auto& grad = owned_[b].mutable_grad();
      const auto& reduced = stage_ == 1 ? transient_[b] : reduced_[b];
      if (!grad.is_same(reduced)) grad.copy_(reduced);
      transient_[b] = torch::Tensor();
      inputs_[b] = torch::Tensor();
    }
    std::vector<torch::Tensor> grads;
    for (const auto& m : owned_) grads.push_back(m.grad());
    const double norm = std::sqrt(strata::global_square_sum(grads, *comm_));
    strata::clip_gradients(owned_, norm, max_norm);
    return norm;
  }

  void step(double lr) override {
    strata::set_learning_rate(*optimizer_, lr);
    optimizer_->step();
    {
      torch::NoGradGuard no_grad;
      if (precision_.mixed())
        for (std::size_t b = 0; b < buckets_.size(); ++b) buckets_[b].owned_params().copy_(owned_[b]);
      gather_parameters();
    }
    for (auto& m : owned_) m.mutable_grad().zero_();
    for (auto& f : grad_flats_) f.zero_();
    for (auto& g : reduced_) g.zero_();
  }

  double parameter_norm() override { return std::sqrt(strata::global_square_sum(owned_, *comm_)); }

  strata::ModelStateBytes memory() const override {
    std::vector<torch::Tensor> params = owned_;
    std::vector<torch::Tensor> grads = stage_ == 1 ? grad_flats_ : reduced_;
    for (const auto& b : buckets_) params.push_back(b.flat_params);
    for (const auto& m : owned_) grads.push_back(m.grad());
    return {strata::storage_bytes(params), strata::storage_bytes(grads),
            optimizer_ ? strata::optimizer_state_bytes(*optimizer_) : 0};
  }

  /// The float32 masters, gathered (under a mixed policy the replica holds rounded values).
  strata::StateDict full_state_dict() override {
    if (!precision_.mixed()) return ReplicaStrategy::full_state_dict();
    torch::NoGradGuard no_grad;
    strata::StateDict state;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      auto full = torch::empty({buckets_[b].padded}, owned_[b].options().requires_grad(false));
      comm_->all_gather(full, owned_[b].detach());
      auto views = buckets_[b].param_views(full, params_);
      for (std::size_t k = 0; k < views.size(); ++k)
        state.emplace_back(param_names_[buckets_[b].params[k]], views[k].clone());
    }
    if (comm_->rank() != 0) return {};
    strata::append_buffers(state, *model_);
    return state;
  }

 private:
  void launch(std::size_t bi) {
    auto& b = buckets_[bi];
    torch::NoGradGuard no_grad;
    if (stage_ == 1) {
      const auto& flat = grad_flats_[bi];
      inputs_[bi] = flat.scalar_type() == precision_.reduce ? flat : flat.to(precision_.reduce);
      transient_[bi] = torch::empty({b.chunk}, inputs_[bi].options());
      works_[bi] = comm_->reduce_scatter(transient_[bi], inputs_[bi], strata::ReduceOp::kAvg, /*async=*/true);
    } else {
      auto flat = torch::zeros({b.padded}, reduced_[bi].options());
      auto views = b.param_views(flat, params_);
      for (std::size_t k = 0; k < b.params.size(); ++k) {
        auto& p = params_[b.params[k]];
        views[k].copy_(p.grad());
        p.mutable_grad() = torch::Tensor();
      }
      inputs_[bi] = flat;  // alive until the work is waited
      works_[bi] = comm_->reduce_scatter(reduced_[bi], flat, strata::ReduceOp::kAvg, /*async=*/true);
    }
  }

  /// All-gathers every bucket's parameters from the owned chunks, consecutive buckets together up
  /// to allgather_bucket_mb per call (rank-major: [rank][bucket chunks]).
  void gather_parameters() {
    const auto cap = static_cast<std::int64_t>(options_.allgather_bucket_mb * kMiB);
    const int world = comm_->world_size();
    struct Call {
      std::vector<std::size_t> buckets;
      torch::Tensor input, output;
      std::shared_ptr<strata::CommWork> work;
    };
    std::vector<Call> calls;
    std::int64_t filled = 0;  // bytes of the last call
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      const auto bytes = static_cast<std::int64_t>(buckets_[b].flat_params.nbytes());
      if (calls.empty() || filled + bytes > cap) {
        calls.emplace_back();
        filled = 0;
      }
      calls.back().buckets.push_back(b);
      filled += bytes;
    }
    for (auto& c : calls) {
      if (c.buckets.size() == 1) {
        auto& b = buckets_[c.buckets.front()];
        c.input = b.owned_params().clone();  // the output overlaps the input
        c.output = b.flat_params;
      } else {
        std::vector<torch::Tensor> chunks;
        for (auto i : c.buckets) chunks.push_back(buckets_[i].owned_params());
        c.input = torch::cat(chunks);
        c.output = torch::empty({c.input.numel() * world}, c.input.options());
      }
      c.work = comm_->all_gather(c.output, c.input, /*async=*/true);
    }
    for (auto& c : calls) {
      c.work->wait();
      if (c.buckets.size() == 1) continue;
      auto rows = c.output.view({world, c.input.numel()});
      std::int64_t offset = 0;
      for (auto i : c.buckets) {
        auto& b = buckets_[i];
        b.flat_params.view({world, b.chunk}).copy_(rows.narrow(1, offset, b.chunk));
        offset += b.chunk;
      }
    }
  }

  ZeroOptions options_;
  int stage_;
  strata::Comm* comm_ = nullptr;
  std::vector<strata::ShardedBucket> buckets_;
  strata::BucketSchedule schedule_;
  std::vector<torch::Tensor> owned_;       // optimizer leaves: owned chunks (views) or their float32 masters
  std::vector<torch::Tensor> grad_flats_;  // zero1: full padded gradient buffers (parameter dtype)
  std::vector<torch::Tensor> reduced_;     // zero2: owned gradient chunks (reduce dtype)
  std::vector<torch::Tensor> inputs_;      // per bucket: reduce-scatter input, alive until waited
  std::vector<torch::Tensor> transient_;   // zero1: per bucket reduce-scatter output
  std::vector<std::shared_ptr<strata::CommWork>> works_;
  std::vector<std::unique_ptr<strata::GradReadyHook>> hooks_;
};

class Zero3Strategy final : public strata::ShardedStrategy {
 public:
  explicit Zero3Strategy(ZeroOptions options) : options_(options) {}

  void setup(const strata::StrategySetup& s) override {
    strata::UnitShardOptions o;
    o.group_cap_bytes = static_cast<std::int64_t>(options_.allgather_bucket_mb * kMiB);
    o.reduce_cap_bytes = static_cast<std::int64_t>(options_.reduce_bucket_mb * kMiB);
    o.reshard_after_forward = true;
    o.forward_prefetch = o.backward_prefetch = static_cast<int>(options_.prefetch);
    o.overlap = options_.overlap;
    take_over(s, *s.comm, nullptr, o);
    s.log->info(fmt::format("zero3: {}; reduce buckets <= {} MiB, prefetch {}, overlap {}", shards_->describe(),
                            options_.reduce_bucket_mb, options_.prefetch, options_.overlap));
  }

 private:
  ZeroOptions options_;
};

void register_zero(strata::Registry& registry) {
  strata::Schema<ZeroOptions> schema;
  schema.option("reduce_bucket_mb", &ZeroOptions::reduce_bucket_mb, "gradient reduce-scatter bucket size in MiB",
                strata::positive())
      .option("allgather_bucket_mb", &ZeroOptions::allgather_bucket_mb,
              "parameter all-gather size per call in MiB (zero3: a larger unit is gathered in several groups)",
              strata::positive())
      .option("overlap", &ZeroOptions::overlap,
              "reduce-scatter gradients from autograd hooks during backward (false: after backward)");
  strata::Schema<ZeroOptions> schema3 = schema;
  schema3.option("prefetch", &ZeroOptions::prefetch, "units whose all-gather is issued ahead of use (0: none)",
                 strata::at_least(0));
  registry.add_strategy("zero1", "ZeRO-1: optimizer state sharded, bucketed reduce-scatter + all-gather", schema,
                        [](const ZeroOptions& o) { return std::make_shared<ZeroStrategy>(o, 1); });
  registry.add_strategy("zero2", "ZeRO-2: optimizer state and gradients sharded", schema,
                        [](const ZeroOptions& o) { return std::make_shared<ZeroStrategy>(o, 2); });
  registry.add_strategy("zero3", "ZeRO-3: parameters, gradients and optimizer state sharded, gathered per unit",
                        schema3, [](const ZeroOptions& o) { return std::make_shared<Zero3Strategy>(o); });
}

}  // namespace

STRATA_PLUGIN(strategy, "zero1,zero2,zero3", "0.1.0", register_zero)
