#pragma once
/// \file precision.hpp
/// The mixed-precision policy (`[precision]`), one for every strategy that supports it: the dtype
/// parameters have in forward and backward, and the dtype gradients are communicated in. Master
/// weights and optimizer state stay float32 whenever the parameter dtype is lower, so the update
/// is the one of fp32 training applied to low-precision compute (Micikevicius et al. 2018).

#include <string>

#include <torch/types.h>

namespace strata {

struct PrecisionPolicy {
  torch::ScalarType param = torch::kFloat32;   ///< parameters in forward and backward
  torch::ScalarType reduce = torch::kFloat32;  ///< gradients on the wire
  /// True when parameters are computed in a lower precision than their fp32 master copy.
  bool mixed() const noexcept { return param != torch::kFloat32; }
  /// "params bfloat16, gradients reduced in float32, master weights and optimizer state float32".
  std::string describe() const;
};

/// Dtype named in a config ("float32", "bfloat16"); throws strata::Error for other names.
torch::ScalarType dtype_from_name(const std::string& name);
/// The config name of a dtype ("float32", "bfloat16", ...).
std::string dtype_name(torch::ScalarType dtype);

}  // namespace strata
