#include "strata/model.hpp"

#include <torch/nn/functional/loss.h>

namespace strata {

void Model::add_unit(const std::string& name, std::shared_ptr<Unit> unit) {
  units_.push_back(register_module(name, std::move(unit)));
  unit_names_.push_back(name);
}

torch::Tensor Model::forward(torch::Tensor x) {
  for (const auto& unit : units_) x = unit->forward(x);
  return x;
}

torch::Tensor Model::loss(const torch::Tensor& output, const torch::Tensor& target) const {
  return torch::nn::functional::cross_entropy(output, target);
}

MetricCounts Model::metric(const torch::Tensor& output, const torch::Tensor& target) const {
  auto correct = output.argmax(-1).eq(target).sum().item<double>();
  return {correct, static_cast<double>(target.numel())};
}

std::int64_t Model::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace strata
