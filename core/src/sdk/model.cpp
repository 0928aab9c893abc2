#include "strata/model.hpp"

#include <set>

#include <torch/nn/functional/loss.h>

namespace strata {

BatchContext BatchContext::of(const Batch& batch) {
  BatchContext c;
  if (!batch.mask.defined()) return c;
  c.mask = batch.mask.to(torch::kBool);
  // Positions count real tokens only, so a left-padded sequence starts at 0 like an unpadded one.
  c.positions = (c.mask.to(torch::kInt64).cumsum(1) - 1).clamp_min(0);
  return c;
}

void Model::add_unit(const std::string& name, std::shared_ptr<Unit> unit) {
  units_.push_back(register_module(name, std::move(unit)));
  unit_names_.push_back(name);
}

torch::Tensor Model::forward(torch::Tensor x, const BatchContext& context) {
  for (const auto& unit : units_) x = unit->forward(x, context);
  return x;
}

torch::Tensor Model::loss(const torch::Tensor& output, const Batch& batch) const {
  namespace F = torch::nn::functional;
  return F::cross_entropy(output.reshape({-1, output.size(-1)}), batch.targets.reshape({-1}),
                          F::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(kIgnoreIndex));
}

MetricSums Model::metric_sums(const torch::Tensor& output, const Batch& batch) const {
  return classification_sums(output, batch.targets);
}

Metrics Model::finalize_metrics(const std::map<std::string, double>& sums, double /*mean_loss*/) const {
  return classification_metrics(sums);
}

std::int64_t Model::parameter_count() const {
  std::int64_t n = 0;
  std::set<const void*> seen;  // a tied tensor registered under two names counts once
  for (const auto& p : parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  return n;
}

MetricSums classification_sums(const torch::Tensor& logits, const torch::Tensor& targets) {
  const auto f64 = [](const torch::Tensor& t) { return t.sum().to(torch::kFloat64); };
  const auto counted = targets.ne(kIgnoreIndex);
  const auto predicted = logits.argmax(-1);
  MetricSums sums{{"correct", f64(predicted.eq(targets) & counted)}, {"total", f64(counted)}};
  if (logits.size(-1) == 2) {
    const auto p = predicted.eq(1) & counted, t = targets.eq(1) & counted;
    sums.emplace_back("tp", f64(p & t));
    sums.emplace_back("fp", f64(p & t.logical_not()));
    sums.emplace_back("fn", f64(p.logical_not() & t));
  }
  return sums;
}

Metrics classification_metrics(const std::map<std::string, double>& sums) {
  const auto at = [&](const char* key) {
    auto it = sums.find(key);
    return it == sums.end() ? 0.0 : it->second;
  };
  Metrics m{{"accuracy", at("total") > 0 ? at("correct") / at("total") : 0.0}};
  if (sums.count("tp") != 0) {
    const double denom = 2 * at("tp") + at("fp") + at("fn");
    m.emplace_back("f1", denom > 0 ? 2 * at("tp") / denom : 0.0);
  }
  return m;
}

}  // namespace strata
