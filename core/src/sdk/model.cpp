#include "strata/model.hpp"

#include <set>
#include <unordered_map>

#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/nn/functional/loss.h>

namespace strata {

namespace {

/// What the backward of a checkpointed unit needs besides its input: the unit and the batch facts.
struct UnitCall final : torch::CustomClassHolder {
  UnitCall(std::shared_ptr<Unit> u, BatchContext c) : unit(std::move(u)), context(std::move(c)) {}
  std::shared_ptr<Unit> unit;
  BatchContext context;
};

/// A unit run without keeping its activations (Chen et al. 2016, "Training Deep Nets with
/// Sublinear Memory Cost"; torch.utils.checkpoint's reentrant form). forward runs the unit with
/// grad off and saves only its input; backward runs the unit again with grad on and
/// back-propagates through that graph (a nested backward: parameter gradients accumulate, and
/// their hooks fire, as in an ordinary backward), returning the input's gradient. Strategies that
/// gather a unit's parameters for its backward (zero3, fsdp) do it from a hook on this function's
/// output, which runs first.
class Recomputed final : public torch::autograd::Function<Recomputed> {
 public:
  /// `anchor`: an empty leaf that requires grad, so that the output requires grad even when `x`
  /// does not (the first unit's input); the unit's parameters reach autograd through the
  /// recomputed graph, not as inputs of this function.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& /*anchor*/, const std::shared_ptr<Unit>& unit,
                               const BatchContext& context) {
    ctx->save_for_backward({x});
    ctx->saved_data["call"] = c10::IValue::make_capsule(c10::make_intrusive<UnitCall>(unit, context));
    ctx->saved_data["input_grad"] = x.requires_grad();
    return unit->forward(x, context);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto call = c10::static_intrusive_pointer_cast<UnitCall>(ctx->saved_data["call"].toCapsule());
    const bool input_grad = ctx->saved_data["input_grad"].toBool();
    auto input = ctx->get_saved_variables().at(0).detach().requires_grad_(input_grad);
    torch::Tensor output;
    {
      torch::AutoGradMode grad_on(true);
      output = call->unit->forward(input, call->context);
    }
    if (output.requires_grad()) torch::autograd::backward({output}, {grads.at(0)});
    return {input_grad ? input.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

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
  for (std::size_t u = 0; u < units_.size(); ++u) x = run_unit(u, x, context);
  return x;
}

torch::Tensor Model::run_unit(std::size_t u, const torch::Tensor& x, const BatchContext& context) {
  const auto& unit = units_.at(u);
  if (!checkpointed(u) || !torch::GradMode::is_enabled()) return unit->forward(x, context);
  const auto anchor = torch::empty({0}, x.options().dtype(torch::kFloat32).requires_grad(true));
  return Recomputed::apply(x, anchor, unit, context);
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

std::vector<std::pair<std::string, torch::Tensor>> unique_trainable_parameters(
    const Model& model, std::vector<std::pair<std::string, std::string>>* aliases) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::unordered_map<const void*, std::string> seen;
  for (const auto& p : model.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    const void* impl = p.value().unsafeGetTensorImpl();
    if (auto it = seen.find(impl); it != seen.end()) {
      if (aliases) aliases->emplace_back(p.key(), it->second);
      continue;
    }
    seen.emplace(impl, p.key());
    out.emplace_back(p.key(), p.value());
  }
  return out;
}

}  // namespace strata
