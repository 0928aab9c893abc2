#pragma once
/// \file precision.hpp
/// The mixed-precision policy (`[precision]`) and the one component through which every strategy
/// applies it: the dtype parameters have in forward and backward, the dtype gradients are
/// communicated in, and the float32 of master weights, optimizer state and gradient accumulation.
/// The update is the one of fp32 training applied to low-precision compute (Micikevicius et al.
/// 2018).

#include <string>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace strata {

struct PrecisionPolicy {
  torch::ScalarType param = torch::kFloat32;   ///< parameters in forward and backward
  torch::ScalarType reduce = torch::kFloat32;  ///< gradients on the wire
  /// True when parameters are computed in a lower precision than their fp32 master copy.
  bool mixed() const noexcept { return param != torch::kFloat32; }
  /// "parameters bfloat16 in forward and backward, gradients reduced in float32, ...".
  std::string describe() const;
};

/// What every strategy does with the policy, in one place:
/// - trainable parameters are optimized as float32 masters (flat_params.hpp keeps them); the
///   model computes with copies in param_dtype();
/// - gradients accumulate over micro-batches in float32 (kAccumulate), whatever the parameter
///   dtype, and travel in reduce_dtype();
/// - buffers and frozen parameters (floating point, requires_grad false) are cast to the
///   parameter dtype once, by cast_frozen_state(), so every strategy computes with the same values;
/// - floating inputs are cast to the parameter dtype, outputs back to float32 for the loss.
class Precision {
 public:
  /// Master weights and optimizer state.
  static constexpr torch::ScalarType kMaster = torch::kFloat32;
  /// Gradients accumulated over the micro-batches of a step.
  static constexpr torch::ScalarType kAccumulate = torch::kFloat32;

  Precision() = default;
  explicit Precision(PrecisionPolicy policy) : policy_(policy) {}
  const PrecisionPolicy& policy() const noexcept { return policy_; }
  torch::ScalarType param_dtype() const noexcept { return policy_.param; }
  torch::ScalarType reduce_dtype() const noexcept { return policy_.reduce; }
  bool mixed() const noexcept { return policy_.mixed(); }

  /// Casts every floating buffer and frozen parameter of `module` (recursively) to the parameter
  /// dtype, in place of the old values. Trainable parameters are left to the flat groups.
  void cast_frozen_state(torch::nn::Module& module) const;
  /// `x` in the parameter dtype when it is floating point (the first unit's input), else `x`.
  torch::Tensor compute(const torch::Tensor& x) const;
  /// The model output in float32, for the loss.
  static torch::Tensor output(const torch::Tensor& y) { return y.to(torch::kFloat32); }
  /// `grads` in the reduce dtype: the same tensor when it already is, else a copy.
  torch::Tensor wire(const torch::Tensor& grads) const;
  std::string describe() const { return policy_.describe(); }

 private:
  PrecisionPolicy policy_;
};

/// Dtype named in a config ("float32", "bfloat16"); throws strata::Error for other names.
torch::ScalarType dtype_from_name(const std::string& name);
/// The config name of a dtype ("float32", "bfloat16", ...).
std::string dtype_name(torch::ScalarType dtype);

}  // namespace strata
