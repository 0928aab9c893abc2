#pragma once
/// \file dataset.hpp
/// A dataset plugin is random-access storage of examples in two splits. The order in which
/// examples are visited (the seed, the epochs, which rank takes which slice of the global batch)
/// belongs to the core's sampler, so every dataset gets the same distributed semantics.

#include <cstdint>
#include <filesystem>
#include <vector>

#include <torch/types.h>

namespace strata {

/// Which part of the data: training examples or held-out evaluation examples.
enum class Split { kTrain, kEval };

/// A batch of examples on the CPU: inputs [n, ...input_shape] float32, targets [n] int64.
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
  std::int64_t size() const { return targets.defined() ? targets.size(0) : 0; }
};

/// Random-access examples. Implementations must be thread-compatible for const access.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of examples in `split`.
  virtual std::int64_t size(Split split) const = 0;
  /// The examples at `indices` (an int64 CPU tensor, values in [0, size(split))).
  virtual Batch get(Split split, const torch::Tensor& indices) const = 0;
  /// Shape of one input sample, e.g. {784} or {1, 28, 28}.
  virtual std::vector<std::int64_t> input_shape() const = 0;
  /// Number of target classes.
  virtual std::int64_t num_classes() const = 0;
};

/// What a dataset factory learns from the host.
struct DatasetContext {
  std::filesystem::path config_dir;  ///< directory of the experiment file (resolve relative paths here)
  std::uint64_t seed = 0;            ///< [train] seed, for datasets generated from a seed
};

}  // namespace strata
