#include "strata/dataset.hpp"

namespace strata {

Augmenting::~Augmenting() = default;

namespace {

torch::Tensor moved(const torch::Tensor& t, torch::Device device, bool non_blocking) {
  return t.defined() ? t.to(device, non_blocking) : t;
}

torch::Tensor sliced(const torch::Tensor& t, std::int64_t lo, std::int64_t hi) {
  return t.defined() ? t.slice(0, lo, hi) : t;
}

}  // namespace

Batch Batch::to(torch::Device device, bool non_blocking) const {
  return {moved(inputs, device, non_blocking), moved(targets, device, non_blocking), moved(mask, device, non_blocking)};
}

Batch Batch::slice(std::int64_t lo, std::int64_t hi) const {
  return {sliced(inputs, lo, hi), sliced(targets, lo, hi), sliced(mask, lo, hi)};
}

torch::Tensor Batch::target_count() const { return targets.ne(kIgnoreIndex).sum().to(torch::kFloat64); }

}  // namespace strata
