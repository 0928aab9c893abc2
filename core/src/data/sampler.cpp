#include "data/sampler.hpp"

#include <numeric>
#include <stdexcept>

namespace strata {

namespace {
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

std::vector<std::int64_t> seeded_permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::uint64_t state = seed;
  for (std::int64_t i = n - 1; i > 0; --i) {
    // Multiply-shift maps 64 random bits to [0, i] without a division; bias is below 2^-32.
    auto j = static_cast<std::int64_t>((static_cast<unsigned __int128>(splitmix64(state)) * (i + 1)) >> 64);
    std::swap(p[i], p[j]);
  }
  return p;
}

std::pair<std::int64_t, std::int64_t> rank_slice(std::int64_t count, int world_size, int rank) {
  return {count * rank / world_size, count * (rank + 1) / world_size};
}

BatchSampler::BatchSampler(SamplerOptions options) : options_(options) {
  const auto per_rank_micros = static_cast<std::int64_t>(options_.world_size) * options_.micro_batches;
  if (options_.global_batch <= 0 || options_.global_batch > options_.dataset_size ||
      options_.global_batch % per_rank_micros != 0)
    throw std::invalid_argument("BatchSampler: global batch must be in [1, dataset size] and divisible by "
                                "world_size * micro_batches");
  micro_size_ = options_.global_batch / per_rank_micros;
  steps_per_epoch_ = options_.dataset_size / options_.global_batch;
}

const std::vector<std::int64_t>& BatchSampler::permutation(std::int64_t epoch) {
  if (epoch != cached_epoch_) {
    // Distinct, well-mixed stream per (seed, epoch).
    std::uint64_t mix = options_.seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(epoch);
    permutation_ = seeded_permutation(options_.dataset_size, splitmix64(mix));
    cached_epoch_ = epoch;
  }
  return permutation_;
}

torch::Tensor BatchSampler::indices(std::int64_t step, std::int64_t micro) {
  const auto& perm = permutation(step / steps_per_epoch_);
  const std::int64_t batch_start = (step % steps_per_epoch_) * options_.global_batch;
  const std::int64_t rank_start = batch_start + micro_size_ * options_.micro_batches * options_.rank;
  const std::int64_t start = rank_start + micro_size_ * micro;
  auto out = torch::empty({micro_size_}, torch::kInt64);
  std::copy(perm.begin() + start, perm.begin() + start + micro_size_, out.data_ptr<std::int64_t>());
  return out;
}

}  // namespace strata
