#include "strata/buckets.hpp"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "strata/errors.hpp"

namespace strata::inline kit_v3 {

std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<torch::Tensor>& params,
                                                     std::int64_t cap_bytes) {
  std::vector<std::vector<std::size_t>> buckets;
  std::int64_t filled = 0;
  for (std::size_t k = params.size(); k-- > 0;) {
    const auto bytes = static_cast<std::int64_t>(params[k].nbytes());
    const bool new_bucket = buckets.empty() || (filled > 0 && filled + bytes > cap_bytes) ||
                            params[buckets.back().front()].scalar_type() != params[k].scalar_type();
    if (new_bucket) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(k);
    filled += bytes;
  }
  return buckets;
}

BucketSchedule::BucketSchedule(const std::vector<std::vector<std::size_t>>& buckets, std::size_t param_count,
                               std::function<void(std::size_t)> launch)
    : bucket_of_(param_count), pending_(buckets.size()), ready_(param_count, false), launch_(std::move(launch)) {
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    sizes_.push_back(buckets[b].size());
    for (auto i : buckets[b]) bucket_of_[i] = b;
  }
  next_ = pending_.size();
}

void BucketSchedule::start_round() {
  pending_ = sizes_;
  ready_.assign(ready_.size(), false);
  next_ = 0;
  open_ = true;
}

void BucketSchedule::mark_ready(std::size_t param) {
  if (!open_ || ready_[param]) return;
  ready_[param] = true;
  --pending_[bucket_of_[param]];
  launch_startable();
}

std::vector<std::size_t> BucketSchedule::missing() const {
  std::vector<std::size_t> out;
  if (!open_) return out;
  for (std::size_t i = 0; i < ready_.size(); ++i)
    if (!ready_[i]) out.push_back(i);
  return out;
}

void BucketSchedule::launch_rest() {
  for (auto& p : pending_) p = 0;
  launch_startable();
}

void BucketSchedule::launch_startable() {
  while (next_ < pending_.size() && pending_[next_] == 0) launch_(next_++);
}

namespace {
class AccumulatorHook final : public GradReadyHook {
 public:
  AccumulatorHook(std::shared_ptr<torch::autograd::Node> accumulator, std::uintptr_t key)
      : accumulator_(std::move(accumulator)), key_(key) {}
  /// The hook refers to its strategy: it must not fire once the strategy is gone.
  ~AccumulatorHook() override { accumulator_->del_post_hook(key_); }

 private:
  std::shared_ptr<torch::autograd::Node> accumulator_;
  std::uintptr_t key_;
};
}  // namespace

std::unique_ptr<GradReadyHook> add_grad_ready_hook(const torch::Tensor& param, std::function<void()> fn) {
  if (!param.requires_grad() || !param.is_leaf())
    throw Error("add_grad_ready_hook needs a leaf tensor that requires grad.");
  auto accumulator = torch::autograd::impl::grad_accumulator(param);
  const auto key = accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [fn = std::move(fn)](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
        fn();
        return outputs;
      }));
  return std::make_unique<AccumulatorHook>(std::move(accumulator), key);
}

}  // namespace strata::inline kit_v3
