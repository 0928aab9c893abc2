#pragma once
/// \file flat_shard.hpp
/// Bucket-sharded flat layout shared by the ZeRO strategies (and reusable by ZeRO-3/FSDP):
/// parameters are grouped with assign_buckets (reverse order); each bucket's elements are
/// concatenated into one flat tensor padded with zeros to a multiple of the world size N, and
/// rank r owns chunk r (padded / N elements) of every bucket. Every per-bucket collective is then
/// equal-split, whatever the parameter count.

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace strata {

struct ShardedBucket {
  std::vector<std::size_t> params;  ///< indices into the strategy's parameter list, in order
  std::vector<std::int64_t> offsets;  ///< element offset of each parameter inside the flat tensor
  std::int64_t numel = 0;   ///< real elements
  std::int64_t padded = 0;  ///< numel rounded up to a multiple of world
  std::int64_t chunk = 0;   ///< padded / world
  int rank = 0;
  torch::Tensor flat_params;  ///< padded; the parameters are views into it
  /// This rank's chunk of flat_params (a view).
  torch::Tensor owned_params() const { return flat_params.narrow(0, rank * chunk, chunk); }
  /// Chunk `r` of any padded flat tensor of this bucket.
  torch::Tensor chunk_of(const torch::Tensor& flat, int r) const { return flat.narrow(0, r * chunk, chunk); }
  /// Views of `flat` (a padded tensor of this bucket) shaped like each parameter.
  std::vector<torch::Tensor> param_views(const torch::Tensor& flat, const std::vector<torch::Tensor>& all) const;
};

/// Builds the sharded buckets over `params` (about `cap_bytes` each): allocates each flat tensor
/// (zeros, padded), copies the parameter values in and re-points every parameter at its view
/// (`set_data`, without autograd recording).
std::vector<ShardedBucket> build_sharded_buckets(const std::vector<torch::Tensor>& params, std::int64_t cap_bytes,
                                                 int rank, int world);

}  // namespace strata
