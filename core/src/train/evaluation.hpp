#pragma once
// Evaluation of the model a strategy holds, over the eval split: every rank evaluates its slice
// of each batch and the sums meet in one all-reduce (booked to the eval phase).

#include <cstdint>
#include <string>

#include "strata/comm.hpp"
#include "strata/dataset.hpp"
#include "strata/model.hpp"
#include "strata/strategy.hpp"

namespace strata {

struct EvalResult {
  double loss = 0;
  Metrics metrics;  ///< the model's, e.g. accuracy, f1, perplexity
  std::int64_t examples = 0;
  /// "loss 0.4123  accuracy 0.8812  f1 0.8401"
  std::string describe() const;
};

struct EvalOptions {
  std::int64_t batches = 0;     ///< batches to evaluate; 0 = the whole eval split
  std::int64_t batch_size = 0;  ///< examples per batch (global)
};

/// Evaluates `strategy`'s model on `dataset`'s eval split (a collective of every rank).
EvalResult evaluate(Strategy& strategy, Dataset& dataset, Comm& comm, const torch::Device& device,
                    const EvalOptions& options);

}  // namespace strata
