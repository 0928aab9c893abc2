// The distributed batch sampler: same global batches whatever the world size and accumulation.
#include "test_support.hpp"

#include <set>

#include "data/sampler.hpp"

namespace {
std::vector<std::int64_t> to_vector(const torch::Tensor& t) {
  return {t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + t.numel()};
}

/// Indices of optimizer step `step` gathered over all ranks and micro-batches, in rank order.
std::vector<std::int64_t> global_batch(int world, std::int64_t micro, std::int64_t step) {
  std::vector<std::int64_t> all;
  for (int r = 0; r < world; ++r) {
    strata::BatchSampler s({100, 12, micro, world, r, 7});
    for (std::int64_t m = 0; m < micro; ++m) {
      auto v = to_vector(s.indices(step, m));
      all.insert(all.end(), v.begin(), v.end());
    }
  }
  return all;
}
}  // namespace

TEST_CASE("seeded permutations are deterministic permutations") {
  auto a = strata::seeded_permutation(1000, 42);
  auto b = strata::seeded_permutation(1000, 42);
  auto c = strata::seeded_permutation(1000, 43);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(std::set<std::int64_t>(a.begin(), a.end()).size() == 1000);
}

TEST_CASE("the global batch is the same for every world size and micro-batch count") {
  for (std::int64_t step : {0, 3, 8, 9}) {  // 8 steps per epoch: 9 is in the second epoch
    auto reference = global_batch(1, 1, step);
    CHECK(reference.size() == 12);
    CHECK(global_batch(2, 1, step) == reference);
    CHECK(global_batch(3, 2, step) == reference);
    CHECK(global_batch(1, 4, step) == reference);
    CHECK(global_batch(2, 3, step) == reference);
  }
}

TEST_CASE("one epoch visits each example at most once and epochs reshuffle") {
  strata::BatchSampler s({100, 12, 1, 1, 0, 7});
  CHECK(s.steps_per_epoch() == 8);
  std::set<std::int64_t> seen;
  for (int step = 0; step < 8; ++step)
    for (auto i : to_vector(s.indices(step, 0))) CHECK(seen.insert(i).second);
  CHECK(seen.size() == 96);  // the last partial batch is dropped
  CHECK(to_vector(s.indices(0, 0)) != to_vector(s.indices(8, 0)));
}

TEST_CASE("rank slices partition a range") {
  std::int64_t covered = 0;
  for (int r = 0; r < 3; ++r) {
    auto [lo, hi] = strata::rank_slice(10, 3, r);
    CHECK(lo == covered);
    covered = hi;
  }
  CHECK(covered == 10);
  CHECK_THROWS(strata::BatchSampler({100, 10, 1, 3, 0, 0}));
}
