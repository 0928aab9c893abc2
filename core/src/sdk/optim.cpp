// The optimizers of every strategy on multi-tensor kernels. The foreach ops follow the per-parameter
// loops of LibTorch's torch::optim::SGD and AdamW operation by operation, so the CPU results are
// theirs bit for bit (Adam amplifies last-bit differences over hundreds of steps: a different
// rounding would change every loss curve). `fused` AdamW runs torch.optim.AdamW(fused=True)'s
// kernel instead (CPU and CUDA): one pass per tensor and no temporaries.

#include "strata/optim.hpp"

#include <cmath>

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_foreach_sqrt.h>
#include <ATen/ops/_fused_adamw.h>
#include <fmt/format.h>
#include <torch/utils.h>

#include "strata/errors.hpp"

namespace strata {

std::vector<torch::Tensor> Optimizer::grads() const {
  std::vector<torch::Tensor> grads;
  grads.reserve(params_.size());
  for (const auto& p : params_) {
    if (!p.grad().defined())
      throw Error("optimizer step: a parameter has no gradient; strategies keep a zero gradient for every "
                  "parameter they optimize");
    grads.push_back(p.grad());
  }
  return grads;
}

std::int64_t Optimizer::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [name, tensors] : state()) bytes += tensor_bytes(tensors);
  return bytes;
}

namespace {

/// torch.optim.SGD with dampening 0 and no Nesterov: d = g + wd * p; b = d (first step), else
/// b = momentum * b + d; p -= lr * b.
class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<torch::Tensor> params, const OptimizerSpec& spec) : Optimizer(std::move(params)), spec_(spec) {}

  void step(double lr) override {
    if (params_.empty()) return;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> d = grads();
    if (spec_.weight_decay != 0) d = at::_foreach_add(d, params_, spec_.weight_decay);
    if (spec_.momentum != 0) {
      if (buffers_.empty() || !started_) {
        // The first step takes the gradient itself, as torch.optim.SGD does (also into buffers
        // that init_state() made).
        if (buffers_.empty())
          for (const auto& t : d) buffers_.push_back(t.clone());
        else
          for (std::size_t i = 0; i < d.size(); ++i) buffers_[i].copy_(d[i]);
        started_ = true;
      } else {
        at::_foreach_mul_(buffers_, spec_.momentum);
        at::_foreach_add_(buffers_, d, 1.0);
      }
      d = buffers_;
    }
    at::_foreach_add_(params_, d, -lr);
  }

  OptimizerState state() const override {
    if (buffers_.empty()) return {};
    return {{"momentum_buffer", buffers_}};
  }

  void init_state() override {
    if (spec_.momentum == 0 || !buffers_.empty()) return;
    for (const auto& p : params_) buffers_.push_back(torch::zeros_like(p));
  }
  // Loaded buffers are the momentum of steps already taken.
  void state_loaded() override { started_ = !buffers_.empty(); }

 private:
  OptimizerSpec spec_;
  std::vector<torch::Tensor> buffers_;
  bool started_ = false;  // a step has filled the buffers
};

/// torch::optim::AdamW: p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). Multi-tensor ops in LibTorch's
/// order, or (fused) one kernel per tensor whose step counts live on the device.
class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<torch::Tensor> params, const OptimizerSpec& spec) : Optimizer(std::move(params)), spec_(spec) {}

  void step(double lr) override {
    if (params_.empty()) return;
    torch::NoGradGuard no_grad;
    const auto g = grads();
    init_state();
    at::_foreach_add_(steps_, 1.0);  // device-side counts (no host sync), as the fused kernel wants
    const double beta1 = spec_.betas.at(0), beta2 = spec_.betas.at(1);
    if (spec_.fused) {
      at::_fused_adamw_(params_, g, exp_avg_, exp_avg_sq_, /*max_exp_avg_sqs=*/{}, steps_, lr, beta1, beta2,
                        spec_.weight_decay, spec_.eps, /*amsgrad=*/false, /*maximize=*/false);
      return;
    }
    ++count_;  // the same count on the host, for the bias corrections
    const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(count_));
    const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(count_));
    if (spec_.weight_decay != 0) at::_foreach_mul_(params_, 1 - lr * spec_.weight_decay);
    at::_foreach_mul_(exp_avg_, beta1);
    at::_foreach_add_(exp_avg_, g, 1 - beta1);
    at::_foreach_mul_(exp_avg_sq_, beta2);
    at::_foreach_addcmul_(exp_avg_sq_, g, g, 1 - beta2);
    auto denom = at::_foreach_sqrt(exp_avg_sq_);
    at::_foreach_div_(denom, std::sqrt(bias_correction2));
    at::_foreach_add_(denom, spec_.eps);
    at::_foreach_addcdiv_(params_, exp_avg_, denom, -(lr / bias_correction1));
  }

  OptimizerState state() const override {
    if (steps_.empty()) return {};
    return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}, {"step", steps_}};
  }

  void init_state() override {
    if (!steps_.empty()) return;
    for (const auto& p : params_) {
      exp_avg_.push_back(torch::zeros_like(p));
      exp_avg_sq_.push_back(torch::zeros_like(p));
      steps_.push_back(torch::zeros({}, p.options().requires_grad(false)));
    }
  }
  void state_loaded() override {
    count_ = steps_.empty() ? 0 : static_cast<std::int64_t>(steps_.front().item<float>());
  }

 private:
  OptimizerSpec spec_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_, steps_;
  std::int64_t count_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(std::vector<torch::Tensor> params, const OptimizerSpec& spec) {
  for (const auto& p : params)
    if (p.scalar_type() != torch::kFloat32 || !p.is_contiguous())
      throw Error(fmt::format("the optimizer updates contiguous float32 tensors (masters); got a {} {}tensor",
                              c10::toString(p.scalar_type()), p.is_contiguous() ? "" : "non-contiguous "));
  if (spec.name == "sgd") return std::make_unique<Sgd>(std::move(params), spec);
  if (spec.name == "adamw") return std::make_unique<AdamW>(std::move(params), spec);
  throw Error("unknown optimizer '" + spec.name + "'", "Use optimizer.name = \"sgd\" or \"adamw\".");
}

std::int64_t tensor_bytes(const std::vector<torch::Tensor>& tensors) {
  std::int64_t bytes = 0;
  for (const auto& t : tensors)
    if (t.defined()) bytes += static_cast<std::int64_t>(t.nbytes());
  return bytes;
}

torch::Tensor square_sum(const std::vector<torch::Tensor>& tensors, torch::Device device, SumPrecision precision) {
  std::vector<torch::Tensor> defined;
  for (const auto& t : tensors)
    if (t.defined() && t.numel() > 0) defined.push_back(t.detach());
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  if (defined.empty()) return torch::zeros({}, f64);
  if (precision == SumPrecision::kExact) {
    auto total = torch::zeros({}, f64);
    for (const auto& t : defined) total += t.to(torch::kFloat64).square().sum();
    return total;
  }
  // Norms of each tensor in float32, squared and summed in float64.
  const auto norms = at::_foreach_norm(defined, 2, torch::kFloat32);
  return torch::stack(norms).to(torch::kFloat64).square().sum();
}

torch::Tensor global_square_sum(const std::vector<torch::Tensor>& tensors, Comm& comm, SumPrecision precision) {
  auto sum = square_sum(tensors, comm.device(), precision).reshape({1});
  if (!comm.skips_collectives()) comm.all_reduce(sum, ReduceOp::kSum);
  return sum.reshape({});
}

void clip_gradients(const std::vector<torch::Tensor>& grads, const torch::Tensor& norm, double max_norm) {
  if (max_norm <= 0 || grads.empty()) return;
  torch::NoGradGuard no_grad;
  // 1 when the norm is within bounds: an exact multiply, so unclipped steps are unchanged.
  const auto coef = (max_norm / (norm + 1e-6)).clamp_max(1.0).to(torch::kFloat32);
  std::vector<torch::Tensor> defined;
  for (const auto& g : grads)
    if (g.defined()) defined.push_back(g);
  at::_foreach_mul_(defined, coef);
}

}  // namespace strata
