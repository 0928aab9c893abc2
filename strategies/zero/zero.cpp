// `zero1`, `zero2`: ZeRO stages 1 and 2 (Rajbhandari, Rasley, Ruwase, He, "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", SC 2020 / arXiv:1910.02054, 2019).
// Every rank holds the full parameters; they live in flat buckets (strata/flat_shard.hpp, reverse
// parameter order, about `reduce_bucket_mb` each, padded to a multiple of the world size), and rank
// r owns chunk r of every bucket. The optimizer (and its state) covers the owned chunks only.
// At the last micro-batch, bucket hooks launch an asynchronous reduce-scatter (average) of each
// bucket's gradients as soon as the bucket is complete; after the optimizer step on the owned
// chunks, every bucket's parameters are all-gathered. The all-gather uses the same buckets as the
// reduce-scatter (there is no separate all-gather bucket size).
//   zero1: gradients accumulate in persistent full-size flat buffers (the .grad are views); the
//          reduced owned chunk is copied back into the buffer. Optimizer state sharded.
//   zero2: gradients are autograd's own (transient) tensors; at the last micro-batch each bucket is
//          flattened into a transient buffer, reduce-scattered into a persistent owned-gradient
//          chunk, and the full gradients are released. Gradients and optimizer state sharded.

#include <cmath>

#include <fmt/format.h>
#include <torch/types.h>

#include <strata/buckets.hpp>
#include <strata/errors.hpp>
#include <strata/flat_shard.hpp>
#include <strata/plugin.hpp>
#include <strata/replica.hpp>

namespace {

struct ZeroOptions {
  double reduce_bucket_mb = 25.0;  ///< bucket size (reduce-scatter and all-gather), in MiB
};

class ZeroStrategy final : public strata::ReplicaStrategy {
 public:
  ZeroStrategy(ZeroOptions options, int stage) : options_(options), stage_(stage) {}

  void setup(const strata::StrategySetup& s) override {
    place(s);
    comm_ = s.comm;
    broadcast_from_rank0(*comm_);
    const int rank = comm_->rank();
    const int world = comm_->world_size();
    const auto cap = static_cast<std::int64_t>(options_.reduce_bucket_mb * 1024 * 1024);
    buckets_ = strata::build_sharded_buckets(params_, cap, rank, world);

    std::vector<torch::Tensor> owned;
    for (auto& b : buckets_) {
      auto leaf = b.owned_params().detach();
      leaf.set_requires_grad(true);
      owned_.push_back(leaf);
      if (stage_ == 1) {
        auto flat = torch::zeros({b.padded}, b.flat_params.options());
        auto views = b.param_views(flat, params_);
        for (std::size_t k = 0; k < b.params.size(); ++k) params_[b.params[k]].mutable_grad() = views[k];
        grad_flats_.push_back(flat);
        owned_.back().mutable_grad() = b.chunk_of(flat, rank);
      } else {
        auto g = torch::zeros({b.chunk}, b.flat_params.options());
        owned_grads_.push_back(g);
        owned_.back().mutable_grad() = g;
      }
    }
    optimizer_ = strata::make_optimizer(owned_, s.optimizer);

    works_.resize(buckets_.size());
    transient_.resize(buckets_.size());
    std::vector<std::vector<std::size_t>> assignment;
    for (const auto& b : buckets_) assignment.push_back(b.params);
    schedule_ = strata::BucketSchedule(assignment, params_.size(), [this](std::size_t b) { launch(b); });
    for (std::size_t i = 0; i < params_.size(); ++i)
      hooks_.push_back(strata::add_grad_ready_hook(params_[i], [this, i] { schedule_.mark_ready(i); }));
    std::int64_t padding = 0;
    for (auto& b : buckets_) padding += b.padded - b.numel;
    s.log->info(fmt::format("zero{}: {} parameters in {} buckets of <= {} MiB ({} padding elements), world {}",
                            stage_, params_.size(), buckets_.size(), options_.reduce_bucket_mb, padding, world));
  }

  torch::Tensor forward_backward(const strata::Batch& batch, strata::MicroStep micro) override {
    if (micro.last()) schedule_.start_round();
    return replica_forward_backward(batch, micro);
  }

  double finish_gradients(double max_norm) override {
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
    const int rank = comm_->rank();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      works_[b]->wait();
      if (stage_ == 1) buckets_[b].chunk_of(grad_flats_[b], rank).copy_(transient_[b]);
      transient_[b] = torch::Tensor();
    }
    auto sq = strata::grad_square_sum(owned_).to(torch::kFloat64).reshape({1});
    comm_->all_reduce(sq, strata::ReduceOp::kSum);
    const double norm = std::sqrt(sq.item<double>());
    strata::clip_gradients(owned_, norm, max_norm);
    return norm;
  }

  void step(double lr) override {
    strata::set_learning_rate(*optimizer_, lr);
    optimizer_->step();
    {
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> inputs;
      std::vector<std::shared_ptr<strata::CommWork>> gathers;
      for (auto& b : buckets_) {
        inputs.push_back(b.owned_params().clone());
        gathers.push_back(comm_->all_gather(b.flat_params, inputs.back(), /*async=*/true));
      }
      for (auto& w : gathers) w->wait();
    }
    if (stage_ == 1)
      for (auto& f : grad_flats_) f.zero_();
    else
      for (auto& g : owned_grads_) g.zero_();
  }

  strata::ModelStateBytes memory() const override {
    std::vector<torch::Tensor> flats;
    for (const auto& b : buckets_) flats.push_back(b.flat_params);
    return {strata::tensor_bytes(flats), strata::tensor_bytes(stage_ == 1 ? grad_flats_ : owned_grads_),
            optimizer_ ? strata::optimizer_state_bytes(*optimizer_) : 0};
  }

 private:
  void launch(std::size_t bi) {
    auto& b = buckets_[bi];
    if (stage_ == 1) {
      transient_[bi] = torch::empty({b.chunk}, grad_flats_[bi].options());
      works_[bi] = comm_->reduce_scatter(transient_[bi], grad_flats_[bi], strata::ReduceOp::kAvg, /*async=*/true);
    } else {
      torch::NoGradGuard no_grad;
      auto flat = torch::zeros({b.padded}, b.flat_params.options());
      auto views = b.param_views(flat, params_);
      for (std::size_t k = 0; k < b.params.size(); ++k) {
        auto& p = params_[b.params[k]];
        views[k].copy_(p.grad());
        p.mutable_grad() = torch::Tensor();
      }
      transient_[bi] = flat;  // alive until the work is waited
      works_[bi] = comm_->reduce_scatter(owned_grads_[bi], flat, strata::ReduceOp::kAvg, /*async=*/true);
    }
  }

  ZeroOptions options_;
  int stage_;
  strata::Comm* comm_ = nullptr;
  std::vector<strata::ShardedBucket> buckets_;
  strata::BucketSchedule schedule_;
  std::vector<torch::Tensor> owned_;        // optimizer leaves: views of the owned parameter chunks
  std::vector<torch::Tensor> grad_flats_;   // zero1: full padded gradient buffers
  std::vector<torch::Tensor> owned_grads_;  // zero2: owned gradient chunks
  std::vector<torch::Tensor> transient_;    // per bucket: reduce-scatter output (zero1) / input (zero2)
  std::vector<std::shared_ptr<strata::CommWork>> works_;
  std::vector<std::unique_ptr<strata::GradReadyHook>> hooks_;
};

void register_zero(strata::Registry& registry) {
  strata::Schema<ZeroOptions> schema;
  schema.option("reduce_bucket_mb", &ZeroOptions::reduce_bucket_mb,
                "bucket size in MiB (reduce-scatter of gradients and all-gather of parameters)", strata::positive());
  registry.add_strategy("zero1", "ZeRO-1: optimizer state sharded, bucketed reduce-scatter + all-gather", schema,
                        [](const ZeroOptions& o) { return std::make_shared<ZeroStrategy>(o, 1); });
  registry.add_strategy("zero2", "ZeRO-2: optimizer state and gradients sharded", schema,
                        [](const ZeroOptions& o) { return std::make_shared<ZeroStrategy>(o, 2); });
}

}  // namespace

STRATA_PLUGIN(strategy, "zero1,zero2", "0.1.0", register_zero)
