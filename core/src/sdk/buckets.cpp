#include "strata/buckets.hpp"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "strata/errors.hpp"

namespace strata {

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

void GradBucket::bind(const std::vector<torch::Tensor>& all_params) {
  std::int64_t total = 0;
  for (auto i : params) total += all_params[i].numel();
  const auto& first = all_params[params.front()];
  flat = torch::zeros({total}, first.options().requires_grad(false));
  std::int64_t offset = 0;
  for (auto i : params) {
    auto p = all_params[i];
    p.mutable_grad() = flat.narrow(0, offset, p.numel()).view_as(p);
    offset += p.numel();
  }
}

namespace {
class AccumulatorHook final : public GradReadyHook {
 public:
  explicit AccumulatorHook(std::shared_ptr<torch::autograd::Node> accumulator)
      : accumulator_(std::move(accumulator)) {}

 private:
  std::shared_ptr<torch::autograd::Node> accumulator_;
};
}  // namespace

std::unique_ptr<GradReadyHook> add_grad_ready_hook(const torch::Tensor& param, std::function<void()> fn) {
  if (!param.requires_grad() || !param.is_leaf())
    throw Error("add_grad_ready_hook needs a leaf tensor that requires grad.");
  auto accumulator = torch::autograd::impl::grad_accumulator(param);
  accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [fn = std::move(fn)](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
        fn();
        return outputs;
      }));
  return std::make_unique<AccumulatorHook>(std::move(accumulator));
}

}  // namespace strata
