#pragma once
/// \file buckets.hpp
/// Gradient buckets and grad-ready hooks: the machinery of overlapping gradient communication
/// with backward (Li et al., "PyTorch Distributed", VLDB 2020), shared by DDP and ZeRO-2.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/types.h>

namespace strata {

/// Groups parameter indices into buckets of about `cap_bytes` each, in *reverse* parameter order
/// (backward produces gradients roughly last-layer first, so the first bucket fills first). A
/// parameter larger than the cap gets a bucket of its own. Every bucket holds one dtype.
std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<torch::Tensor>& params,
                                                     std::int64_t cap_bytes);

/// A flat gradient buffer for a set of parameters, whose `.grad` become views into it, so that
/// autograd accumulates straight into the buffer and one collective covers the whole bucket.
struct GradBucket {
  std::vector<std::size_t> params;  ///< indices into the strategy's parameter list
  torch::Tensor flat;               ///< contiguous gradients of `params`, in order
  /// Allocates `flat` (zeros, dtype/device of the first parameter) and points each parameter's
  /// grad at its slice of it.
  void bind(const std::vector<torch::Tensor>& all_params);
};

/// Keeps a grad-ready hook registered: owns the parameter's gradient accumulator node (autograd
/// holds it only weakly) for as long as the hook must fire.
class GradReadyHook {
 public:
  virtual ~GradReadyHook() = default;
};

/// Calls `fn` each time autograd has accumulated a new gradient into `param.grad()` (a post hook
/// on the parameter's AccumulateGrad node, as PyTorch's DDP reducer does). `param` must be a leaf
/// that requires grad. The hook stays registered while the returned object lives.
std::unique_ptr<GradReadyHook> add_grad_ready_hook(const torch::Tensor& param, std::function<void()> fn);

}  // namespace strata
