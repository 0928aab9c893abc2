#pragma once
/// \file optim.hpp
/// The optimizer specification from `[optimizer]`, and helpers that strategies use to build and
/// account for the optimizer over the parameters they hold.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include "strata/comm.hpp"

namespace strata {

/// `[optimizer]`: which optimizer and its hyperparameters.
struct OptimizerSpec {
  std::string name = "adamw";          ///< "sgd" or "adamw"
  double lr = 1e-3;                    ///< peak learning rate
  double weight_decay = 0.0;           ///< decoupled for AdamW, L2 for SGD
  double momentum = 0.9;               ///< SGD momentum (0 disables the buffer)
  std::vector<double> betas = {0.9, 0.999};  ///< AdamW (beta1, beta2)
  double eps = 1e-8;                   ///< AdamW denominator epsilon
};

/// Builds the optimizer over `params` (the tensors this rank updates).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params,
                                                        const OptimizerSpec& spec);
/// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);
/// Bytes of optimizer state tensors currently allocated (momentum, Adam moments, step counters).
std::int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);
/// Sum of nbytes() over defined tensors.
std::int64_t tensor_bytes(const std::vector<torch::Tensor>& tensors);

/// Sum of squares of the defined gradients of `params`, as a float64 scalar tensor on their
/// device (0 when none). Sharded strategies all-reduce this before taking the square root.
torch::Tensor grad_square_sum(const std::vector<torch::Tensor>& params);
/// Sum of squares of `tensors`, as a float64 scalar tensor.
torch::Tensor square_sum(const std::vector<torch::Tensor>& tensors);
/// square_sum() of this rank's `tensors`, summed over every rank of `comm` (a collective: every
/// rank calls it). Sharded strategies take global norms of parameters and gradients this way.
double global_square_sum(const std::vector<torch::Tensor>& tensors, Comm& comm);
/// Scales the gradients of `params` by max_norm / (norm + 1e-6) when `max_norm > 0` and
/// `norm > max_norm` (the rule of torch.nn.utils.clip_grad_norm_).
void clip_gradients(const std::vector<torch::Tensor>& params, double norm, double max_norm);

}  // namespace strata
