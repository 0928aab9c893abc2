#pragma once
// Which examples each rank sees: DistributedSampler semantics over global batches.
//
// Every rank computes the same permutation of the training split from (seed, epoch); optimizer
// step s takes the s-th run of `global_batch` indices of that permutation (a partial batch at an
// epoch's end is dropped); rank r takes the r-th contiguous slice of it and cuts that slice into
// `micro_batches` sequential micro-batches. Hence the global batch, and so the trained model, is
// the same whatever the world size and accumulation.

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace strata {

struct SamplerOptions {
  std::int64_t dataset_size = 0;   ///< examples in the training split
  std::int64_t global_batch = 1;   ///< examples per optimizer step over all ranks
  std::int64_t micro_batches = 1;  ///< sequential micro-batches per step on each rank
  int world_size = 1;
  int rank = 0;
  std::uint64_t seed = 0;
};

class BatchSampler {
 public:
  /// Requires global_batch <= dataset_size and global_batch divisible by world_size * micro_batches.
  explicit BatchSampler(SamplerOptions options);
  /// Indices (int64 CPU tensor) of this rank's micro-batch `micro` of optimizer step `step` (0-based).
  torch::Tensor indices(std::int64_t step, std::int64_t micro);
  /// Examples per micro-batch on one rank.
  std::int64_t micro_batch_size() const noexcept { return micro_size_; }
  std::int64_t steps_per_epoch() const noexcept { return steps_per_epoch_; }

 private:
  const std::vector<std::int64_t>& permutation(std::int64_t epoch);
  SamplerOptions options_;
  std::int64_t micro_size_;
  std::int64_t steps_per_epoch_;
  std::int64_t cached_epoch_ = -1;
  std::vector<std::int64_t> permutation_;
};

/// A deterministic permutation of [0, n) from a seed (Fisher-Yates over a SplitMix64 stream;
/// identical on every platform and standard library).
std::vector<std::int64_t> seeded_permutation(std::int64_t n, std::uint64_t seed);

/// The contiguous slice [begin, end) of `count` items that `rank` of `world_size` takes.
std::pair<std::int64_t, std::int64_t> rank_slice(std::int64_t count, int world_size, int rank);

}  // namespace strata
