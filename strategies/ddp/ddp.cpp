// `ddp`: distributed data parallel (Li et al., "PyTorch Distributed: Experiences on Accelerating
// Data Parallel Training", VLDB 2020). Every rank holds a full replica; parameters are broadcast
// from rank 0 at setup; gradients live in flat buckets (reverse parameter order, about
// `bucket_cap_mb` each) whose all-reduce starts asynchronously from autograd hooks as soon as the
// bucket's last gradient is accumulated, overlapping the rest of backward. Only the last
// micro-batch of an accumulation communicates (no_sync for the others).

#include <set>

#include <fmt/format.h>

#include <strata/buckets.hpp>
#include <strata/errors.hpp>
#include <strata/plugin.hpp>
#include <strata/replica.hpp>

namespace {

struct DdpOptions {
  double bucket_cap_mb = 25.0;          ///< gradient bucket size, in MiB
  bool find_unused_parameters = false;  ///< tolerate parameters that get no gradient in a step
};

class DdpStrategy final : public strata::ReplicaStrategy {
 public:
  explicit DdpStrategy(DdpOptions options) : options_(options) {}

  void setup(const strata::StrategySetup& s) override {
    take_over(s);
    comm_ = s.comm;
    const auto cap = static_cast<std::int64_t>(options_.bucket_cap_mb * 1024 * 1024);
    const auto assignment = strata::assign_buckets(params_, cap);
    for (const auto& indices : assignment) {
      buckets_.push_back({indices, {}});
      buckets_.back().bind(params_);
    }
    works_.resize(buckets_.size());
    wire_.resize(buckets_.size());
    schedule_ = strata::BucketSchedule(assignment, params_.size(), [this](std::size_t b) {
      // Gradients go on the wire in the policy's reduce dtype.
      auto& flat = buckets_[b].flat;
      wire_[b] = flat.scalar_type() == precision_.reduce ? flat : flat.to(precision_.reduce);
      works_[b] = comm_->all_reduce(wire_[b], strata::ReduceOp::kSum, /*async=*/true);
    });
    used_.assign(params_.size(), false);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      grad_views_.push_back(params_[i].grad());
      hooks_.push_back(strata::add_grad_ready_hook(params_[i], [this, i] { grad_ready(i); }));
    }
    s.log->info(fmt::format("ddp: {} parameters in {} gradient buckets of <= {} MiB, world {}", params_.size(),
                            buckets_.size(), options_.bucket_cap_mb, comm_->world_size()));
  }

  torch::Tensor forward_backward(const strata::Batch& batch, strata::MicroStep micro) override {
    if (micro.last()) schedule_.start_round();
    return replica_forward_backward(batch, micro);
  }

  double finish_gradients(double max_norm) override {
    finish_sync_round();
    return clip_replica_gradients(max_norm);
  }

  void step(double lr) override {
    // A parameter no rank used has no gradient, as in `single`: the optimizer skips it (weight
    // decay and momentum included). Its gradient is re-attached afterwards.
    auto& optimized = precision_.mixed() ? masters_ : params_;
    std::vector<torch::Tensor> detached;
    for (auto i : globally_unused_) {
      detached.push_back(optimized[i].grad());
      optimized[i].mutable_grad() = torch::Tensor();
    }
    replica_step(lr);
    for (std::size_t k = 0; k < globally_unused_.size(); ++k) optimized[globally_unused_[k]].mutable_grad() = detached[k];
    for (auto& b : buckets_) b.flat.zero_();  // grads stay views into the buckets
    used_.assign(params_.size(), false);
  }

 protected:
  /// The flat buckets hold the gradients (the parameters' .grad are views into them).
  std::vector<torch::Tensor> gradient_buffers() const override {
    std::vector<torch::Tensor> flats;
    for (const auto& b : buckets_) flats.push_back(b.flat);
    return flats;
  }

 private:
  /// Autograd hook: parameter i's gradient for this backward is complete.
  void grad_ready(std::size_t i) {
    used_[i] = true;
    schedule_.mark_ready(i);
  }

  void finish_sync_round() {
    if (!schedule_.all_launched()) {
      std::vector<std::string> unused;
      for (auto i : schedule_.missing()) unused.push_back(param_names_[i]);
      if (!options_.find_unused_parameters)
        throw strata::Error(
            fmt::format("ddp: {} parameter(s) received no gradient in this step: {}.", unused.size(),
                        fmt::join(unused, ", ")),
            "Set `find_unused_parameters = true` in [strategy] if the model legitimately skips them.");
      // Unused parameters contribute zeros (their bucket slices were zeroed after the last step).
      schedule_.launch_rest();
    }
    schedule_.end_round();
    if (options_.find_unused_parameters) find_globally_unused();
    const double inverse_world = 1.0 / comm_->world_size();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      works_[b]->wait();
      auto& flat = buckets_[b].flat;
      if (!wire_[b].is_same(flat)) flat.copy_(wire_[b]);
      wire_[b] = torch::Tensor();
      if (comm_->world_size() > 1) flat.mul_(inverse_world);
    }
  }

  /// Which parameters no rank used in this step (any micro-batch): one small all-reduce (MAX)
  /// of a used-mask, issued by every rank in the same place, as PyTorch's reducer does.
  void find_globally_unused() {
    auto used = torch::zeros({static_cast<std::int64_t>(params_.size())}, torch::kFloat32);
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (used_[i]) used[static_cast<std::int64_t>(i)] = 1.0f;
    comm_->all_reduce(used, strata::ReduceOp::kMax);
    globally_unused_.clear();
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (used[static_cast<std::int64_t>(i)].item<float>() == 0.0f) globally_unused_.push_back(i);
  }

  // Configuration.
  DdpOptions options_;
  strata::Comm* comm_ = nullptr;
  // Gradient buckets and the state of the current synchronization round.
  std::vector<strata::GradBucket> buckets_;
  strata::BucketSchedule schedule_;
  std::vector<bool> used_;                // gradient produced in any micro-batch of this step
  std::vector<std::size_t> globally_unused_;
  std::vector<torch::Tensor> grad_views_;  // each parameter's slice of its bucket
  std::vector<torch::Tensor> wire_;        // per bucket: what is all-reduced (the flat, or its reduce-dtype copy)
  std::vector<std::shared_ptr<strata::CommWork>> works_;
  std::vector<std::unique_ptr<strata::GradReadyHook>> hooks_;
};

void register_ddp(strata::Registry& registry) {
  strata::Schema<DdpOptions> schema;
  schema.option("bucket_cap_mb", &DdpOptions::bucket_cap_mb, "gradient bucket size in MiB", strata::positive())
      .option("find_unused_parameters", &DdpOptions::find_unused_parameters,
              "allow parameters without a gradient in a step (they count as zero)");
  registry.add_strategy("ddp", "distributed data parallel: replicas, bucketed all-reduce overlapped with backward",
                        schema, [](const DdpOptions& o) { return std::make_shared<DdpStrategy>(o); });
}

}  // namespace

STRATA_PLUGIN(strategy, "ddp", "0.1.0", register_ddp)
