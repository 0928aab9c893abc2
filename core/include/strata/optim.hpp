#pragma once
/// \file optim.hpp
/// The optimizer specification from `[optimizer]`, the optimizer every strategy steps, and the
/// norms and clipping of gradients, all computed on the tensors' device (no host sync).

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "strata/comm.hpp"
#include "strata/optim_spec.hpp"

namespace strata {

/// Optimizer state of one kind for every parameter, e.g. {"exp_avg", [one tensor per parameter]}.
using OptimizerState = std::vector<std::pair<std::string, std::vector<torch::Tensor>>>;

/// The update rule of a strategy: SGD (momentum, L2 weight decay; PyTorch's torch.optim.SGD) or
/// AdamW (decoupled weight decay, bias-corrected moments; torch.optim.AdamW), applied to a list of
/// float32 tensors with multi-tensor kernels: a few foreach launches per step for the whole list
/// (AdamW with `fused`: one fused kernel per tensor), not a loop of small kernels per parameter.
/// Strategies hand it flat master tensors (one per flat group), so a step is a handful of launches
/// whatever the model. The foreach ops follow LibTorch's torch::optim::SGD and AdamW operation by
/// operation, so on the CPU they give the same values bit for bit.
///
/// Each parameter's `.grad` must be defined when step() runs (strategies keep a zero gradient for
/// a parameter that received none: it is updated like any other, weight decay included). The
/// state (momentum buffers, moments, step counts) lives on the parameters' device, created at
/// the first step.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// One update of every parameter from its gradient, at learning rate `lr`.
  virtual void step(double lr) = 0;
  /// The tensors it updates.
  const std::vector<torch::Tensor>& params() const noexcept { return params_; }
  /// Its state by kind ("momentum_buffer"; "exp_avg", "exp_avg_sq", "step": a float32 scalar per
  /// tensor); empty before the first step.
  virtual OptimizerState state() const = 0;
  /// Creates the state (zeros, step count 0) when it does not exist yet, so that a checkpoint can
  /// be loaded into it; then state() is not empty (unless the rule keeps no state: SGD without
  /// momentum).
  virtual void init_state() = 0;
  /// After the state tensors were overwritten in place (a checkpoint was loaded): refreshes what
  /// the optimizer keeps on the host (the step count of the bias corrections). Reads the device.
  virtual void state_loaded() {}
  /// Bytes of the state tensors allocated so far.
  std::int64_t state_bytes() const;

 protected:
  explicit Optimizer(std::vector<torch::Tensor> params) : params_(std::move(params)) {}
  std::vector<torch::Tensor> grads() const;
  std::vector<torch::Tensor> params_;
};

/// Builds the optimizer of `spec` over `params` (the float32 tensors this rank updates). Throws
/// strata::Error for an unknown name or a parameter that is not float32.
std::unique_ptr<Optimizer> make_optimizer(std::vector<torch::Tensor> params, const OptimizerSpec& spec);

/// Sum of nbytes() over defined tensors.
std::int64_t tensor_bytes(const std::vector<torch::Tensor>& tensors);

/// How a square_sum is accumulated.
enum class SumPrecision {
  kFast,   ///< float32 multi-tensor norms, squared and summed in float64: no copy of any tensor
           ///< (gradient norms, every step; the precision of torch.nn.utils.clip_grad_norm_)
  kExact,  ///< every element squared and summed in float64 (parameter norms, once per run)
};
/// Sum of squares of the defined `tensors` as a float64 scalar on `device`, without a host sync;
/// 0 when none is defined.
torch::Tensor square_sum(const std::vector<torch::Tensor>& tensors, torch::Device device,
                         SumPrecision precision = SumPrecision::kFast);
/// square_sum() of this rank's `tensors`, summed over every rank of `comm` (a collective: every
/// rank calls it), as a float64 scalar on comm.device(). Sharded strategies take global norms of
/// parameters and gradients this way.
torch::Tensor global_square_sum(const std::vector<torch::Tensor>& tensors, Comm& comm,
                                SumPrecision precision = SumPrecision::kFast);
/// Scales `grads` in place by min(1, max_norm / (norm + 1e-6)) when `max_norm > 0` (the rule of
/// torch.nn.utils.clip_grad_norm_), with `norm` read on the device: no host sync.
void clip_gradients(const std::vector<torch::Tensor>& grads, const torch::Tensor& norm, double max_norm);

}  // namespace strata
