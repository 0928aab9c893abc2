#pragma once
/// \file optim_spec.hpp
/// `[optimizer]` as the experiment file gives it. Apart from strata/optim.hpp (which includes it), so
/// that what only reads or writes configuration (the config parser, its fuzzer) compiles without
/// LibTorch's headers.

#include <string>
#include <vector>

namespace strata {

/// `[optimizer]`: which optimizer and its hyperparameters.
struct OptimizerSpec {
  std::string name = "adamw";          ///< "sgd" or "adamw"
  double lr = 1e-3;                    ///< peak learning rate
  double weight_decay = 0.0;           ///< decoupled for AdamW, L2 for SGD
  double momentum = 0.9;               ///< SGD momentum (0 disables the buffer)
  std::vector<double> betas = {0.9, 0.999};  ///< AdamW (beta1, beta2)
  double eps = 1e-8;                   ///< AdamW denominator epsilon
  bool fused = false;                  ///< AdamW: the fused kernel instead of the multi-tensor ops
};

}  // namespace strata
