#include "strata/flat_shard.hpp"

#include <torch/utils.h>

#include "strata/buckets.hpp"

namespace strata {

std::vector<torch::Tensor> ShardedBucket::param_views(const torch::Tensor& flat,
                                                      const std::vector<torch::Tensor>& all) const {
  std::vector<torch::Tensor> views;
  views.reserve(params.size());
  for (std::size_t k = 0; k < params.size(); ++k) {
    const auto& p = all[params[k]];
    views.push_back(flat.narrow(0, offsets[k], p.numel()).view(p.sizes()));
  }
  return views;
}

std::vector<ShardedBucket> build_sharded_buckets(const std::vector<torch::Tensor>& params, std::int64_t cap_bytes,
                                                 int rank, int world) {
  std::vector<ShardedBucket> buckets;
  torch::NoGradGuard no_grad;
  for (auto& indices : assign_buckets(params, cap_bytes)) {
    ShardedBucket b;
    b.params = indices;
    b.rank = rank;
    for (auto i : indices) {
      b.offsets.push_back(b.numel);
      b.numel += params[i].numel();
    }
    b.padded = (b.numel + world - 1) / world * world;
    b.chunk = b.padded / world;
    const auto& first = params[indices.front()];
    b.flat_params = torch::zeros({b.padded}, first.options().requires_grad(false));
    auto views = b.param_views(b.flat_params, params);
    for (std::size_t k = 0; k < indices.size(); ++k) {
      views[k].copy_(params[indices[k]].detach());
      auto p = params[indices[k]];
      p.set_data(views[k]);
    }
    buckets.push_back(std::move(b));
  }
  return buckets;
}

}  // namespace strata
