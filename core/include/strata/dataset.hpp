#pragma once
/// \file dataset.hpp
/// A dataset plugin is random-access storage of examples in two splits. The order in which
/// examples are visited (the seed, the epochs, which rank takes which slice of the global batch)
/// belongs to the core's sampler, so every dataset gets the same distributed semantics.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <torch/types.h>

namespace strata {

/// Which part of the data: training examples or held-out evaluation examples.
enum class Split { kTrain, kEval };

/// A target element equal to this counts for nothing: no loss, no metric, not in the normalizer
/// (padding, prompt tokens). The value is PyTorch's default `ignore_index`.
inline constexpr std::int64_t kIgnoreIndex = -100;

/// A batch of examples. Datasets return it on the CPU; strategies receive it on their device.
struct Batch {
  torch::Tensor inputs;   ///< [n, ...]: float32 images, int64 token ids, any dtype the model reads
  torch::Tensor targets;  ///< int64: [n] labels or [n, T] next tokens; kIgnoreIndex entries are skipped
  torch::Tensor mask;     ///< optional [n, T] attention mask (nonzero = real token); undefined when unpadded
  std::int64_t size() const { return inputs.defined() ? inputs.size(0) : 0; }
  /// The same batch on `device` (every defined tensor).
  Batch to(torch::Device device, bool non_blocking = false) const;
  /// Examples [lo, hi) of the batch (views).
  Batch slice(std::int64_t lo, std::int64_t hi) const;
  /// Target elements that count (not kIgnoreIndex): the loss normalizer's share of this batch, a
  /// float64 scalar on the batch's device (no host sync).
  torch::Tensor target_count() const;
};

/// What the data looks like: what a model needs to size itself, and how the trainer normalizes.
struct DataSpec {
  std::vector<std::int64_t> input_shape;    ///< one sample: {1, 28, 28} for images, {T} for token ids
  torch::ScalarType input_dtype = torch::kFloat32;  ///< dtype of Batch::inputs
  std::int64_t num_classes = 0;  ///< label targets ([n]): number of classes; 0 for token targets
  std::int64_t vocab_size = 0;   ///< token inputs: ids lie in [0, vocab_size); 0 otherwise
  std::int64_t seq_len = 0;      ///< token inputs: maximum sequence length T; 0 otherwise
  std::int64_t pad_id = -1;      ///< token inputs: id of padding (masked out), -1 when none
  /// True when targets may hold kIgnoreIndex (padded or masked targets): the number of target
  /// elements then differs between batches and the trainer counts them on the device every step.
  /// False: every sample has the same number of targets, known without looking.
  bool ignored_targets = false;
  /// Target elements per sample when ignored_targets is false (1 for labels, T for next tokens).
  std::int64_t targets_per_sample = 1;
  bool tokens() const noexcept { return vocab_size > 0; }
};

/// Random-access examples. Implementations must be thread-compatible for const access.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of examples in `split`.
  virtual std::int64_t size(Split split) const = 0;
  /// The examples at `indices` (an int64 CPU tensor, values in [0, size(split))).
  virtual Batch get(Split split, const torch::Tensor& indices) const = 0;
  /// Shapes, dtypes and sizes of the data.
  virtual DataSpec spec() const = 0;
};

/// Optional capability of a dataset that augments training examples at random (crops, flips). The
/// trainer reads training batches through it, with the epoch, so an example's augmentation
/// depends on (seed, example, epoch) only: not on the world size, the rank or the micro-batch.
class Augmenting {
 public:
  virtual ~Augmenting();
  /// Training examples at `indices`, augmented for `epoch` (0-based).
  virtual Batch get_train(const torch::Tensor& indices, std::int64_t epoch) const = 0;
};

/// What a dataset factory learns from the host.
struct DatasetContext {
  std::filesystem::path config_dir;  ///< absolute directory of the experiment file (resolve relative paths here)
  std::uint64_t seed = 0;            ///< [train] seed, for datasets generated or augmented from a seed
};

/// Where a dataset's files lie and what decided it (for messages).
struct DataLocation {
  std::filesystem::path path;  ///< absolute
  std::string origin;          ///< "[dataset] path", "$STRATA_..." or "the default"
  /// " (from <origin>)", to append to a message naming the path.
  std::string from() const { return " (from " + origin + ")"; }
};

/// The data location: `option_path` when not empty, else the environment variable `env_var` when
/// set and not empty, else `fallback`; relative paths are taken relative to the experiment file.
DataLocation locate_data(const std::string& option_path, const char* env_var, const std::filesystem::path& fallback,
                         const DatasetContext& context);

}  // namespace strata
