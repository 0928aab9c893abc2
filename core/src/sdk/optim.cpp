#include "strata/optim.hpp"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "strata/errors.hpp"

namespace strata {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params,
                                                        const OptimizerSpec& spec) {
  if (spec.name == "sgd") {
    torch::optim::SGDOptions o(spec.lr);
    o.momentum(spec.momentum).weight_decay(spec.weight_decay);
    return std::make_unique<torch::optim::SGD>(params, o);
  }
  if (spec.name == "adamw") {
    torch::optim::AdamWOptions o(spec.lr);
    o.betas({spec.betas.at(0), spec.betas.at(1)}).eps(spec.eps).weight_decay(spec.weight_decay);
    return std::make_unique<torch::optim::AdamW>(params, o);
  }
  throw Error("unknown optimizer '" + spec.name + "'", "Use optimizer.name = \"sgd\" or \"adamw\".");
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

std::int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  std::int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
      for (const auto& t : {adamw->exp_avg(), adamw->exp_avg_sq(), adamw->max_exp_avg_sq()})
        if (t.defined()) bytes += t.nbytes();
      bytes += sizeof(std::int64_t);  // step counter
    } else if (auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state.get())) {
      if (sgd->momentum_buffer().defined()) bytes += sgd->momentum_buffer().nbytes();
    }
  }
  return bytes;
}

std::int64_t tensor_bytes(const std::vector<torch::Tensor>& tensors) {
  std::int64_t bytes = 0;
  for (const auto& t : tensors)
    if (t.defined()) bytes += t.nbytes();
  return bytes;
}

torch::Tensor square_sum(const std::vector<torch::Tensor>& tensors) {
  torch::Tensor total;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    auto s = t.detach().to(torch::kFloat64).pow(2).sum();
    total = total.defined() ? total + s : s;
  }
  return total.defined() ? total : torch::zeros({}, torch::kFloat64);
}

torch::Tensor grad_square_sum(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return square_sum(grads);
}

double global_square_sum(const std::vector<torch::Tensor>& tensors, Comm& comm) {
  auto sum = square_sum(tensors).reshape({1});
  comm.all_reduce(sum, ReduceOp::kSum);
  return sum.item<double>();
}

void clip_gradients(const std::vector<torch::Tensor>& params, double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return;
  const double scale = max_norm / (norm + 1e-6);
  torch::NoGradGuard no_grad;
  for (const auto& p : params)
    if (p.grad().defined()) p.grad().mul_(scale);
}

}  // namespace strata
