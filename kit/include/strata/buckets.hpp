#pragma once
/// \file buckets.hpp
/// Bucket assignment, the launch schedule of bucket collectives and grad-ready hooks: the
/// machinery of overlapping gradient communication with backward (Li et al., "PyTorch
/// Distributed", VLDB 2020), used by strata::GradReducer for every strategy.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/types.h>

#include "strata/kit.hpp"

namespace strata::inline kit_v3 {

/// Groups parameter indices into buckets of about `cap_bytes` each, in *reverse* parameter order
/// (backward produces gradients roughly last-layer first, so the first bucket fills first). A
/// parameter larger than the cap gets a bucket of its own. Every bucket holds one dtype.
std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<torch::Tensor>& params,
                                                     std::int64_t cap_bytes);

/// When to start each bucket's collective during backward. Collectives must be issued in the
/// same order on every rank, so bucket b starts only once it and every bucket before it have all
/// their gradients. A round covers one synchronizing backward (the last micro-batch); outside a
/// round, mark_ready() does nothing (no_sync).
class BucketSchedule {
 public:
  BucketSchedule() = default;
  /// `buckets` holds parameter indices (< param_count); `launch(b)` starts bucket b's collective.
  BucketSchedule(const std::vector<std::vector<std::size_t>>& buckets, std::size_t param_count,
                 std::function<void(std::size_t)> launch);
  /// Opens a round: every gradient is pending again.
  void start_round();
  /// Parameter `param`'s gradient is complete; launches every bucket that became startable.
  void mark_ready(std::size_t param);
  /// True when every bucket of the round has been launched.
  bool all_launched() const noexcept { return next_ == pending_.size(); }
  /// Buckets launched so far in this round (0 .. bucket count).
  std::size_t launched() const noexcept { return next_; }
  /// Parameters whose gradient did not arrive in this round.
  std::vector<std::size_t> missing() const;
  /// Treats every missing gradient as ready (its buffer counts as it is) and launches the rest.
  void launch_rest();
  /// Closes the round.
  void end_round() noexcept { open_ = false; }

 private:
  void launch_startable();
  std::vector<std::size_t> bucket_of_;  // parameter -> bucket
  std::vector<std::size_t> sizes_;      // parameters per bucket
  std::vector<std::size_t> pending_;    // gradients still missing per bucket
  std::vector<bool> ready_;             // per parameter, in this round
  std::function<void(std::size_t)> launch_;
  std::size_t next_ = 0;                // first bucket not launched yet
  bool open_ = false;
};

/// Keeps a grad-ready hook registered: owns the parameter's gradient accumulator node (autograd
/// holds it only weakly) for as long as the hook must fire, and removes the hook when destroyed.
class GradReadyHook {
 public:
  virtual ~GradReadyHook() = default;
};

/// Calls `fn` each time autograd has accumulated a new gradient into `param.grad()` (a post hook
/// on the parameter's AccumulateGrad node, as PyTorch's DDP reducer does). `param` must be a leaf
/// that requires grad. The hook stays registered while the returned object lives.
std::unique_ptr<GradReadyHook> add_grad_ready_hook(const torch::Tensor& param, std::function<void()> fn);

}  // namespace strata::inline kit_v3
