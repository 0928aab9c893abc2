#pragma once
// Tensor-by-tensor comparison of two saved models (final_model.pt files), for `strata check`.
// Declared without LibTorch types so that callers need not compile its headers.

#include <filesystem>
#include <string>

namespace strata {

struct ModelDifference {
  double max_rel = 0;   ///< max over tensors of max|a - b| / max|a|
  std::string tensor;   ///< the tensor where it is largest
  std::string problem;  ///< non-empty when the files cannot be compared (missing, other names or shapes)
};

/// Compares `candidate` with `reference`, both written by save_state_dict().
ModelDifference compare_saved_models(const std::filesystem::path& reference, const std::filesystem::path& candidate);

}  // namespace strata
