// Bucket assignment and grad-ready hooks (SDK helpers of strata::GradReducer).
#include "test_support.hpp"

#include "strata/buckets.hpp"

using strata::test::make_params;

TEST_CASE("buckets follow reverse parameter order and respect the cap") {
  auto params = make_params({5, 3, 7, 2});  // 20, 12, 28, 8 bytes
  auto buckets = strata::assign_buckets(params, 32);
  // Reverse order: 3 (8 B), 2 (28 B) -> 36 B > 32: new bucket; 1 + 0 -> 32 B fits.
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0] == std::vector<std::size_t>{3});
  CHECK(buckets[1] == std::vector<std::size_t>{2});
  CHECK(buckets[2] == std::vector<std::size_t>{1, 0});
  // A parameter larger than the cap gets a bucket of its own.
  auto big = strata::assign_buckets(make_params({100, 1}), 16);
  CHECK(big.size() == 2);
  CHECK(strata::assign_buckets(params, 1 << 20).size() == 1);
}

TEST_CASE("grad-ready hooks fire once per accumulation, after the grad is updated") {
  auto params = make_params({4});
  int calls = 0;
  float seen = 0;
  auto hook = strata::add_grad_ready_hook(params[0], [&] {
    ++calls;
    seen = params[0].grad().sum().item<float>();
  });
  (params[0] * 3).sum().backward();
  CHECK(calls == 1);
  CHECK(seen == 12.0f);
  (params[0] + params[0]).sum().backward();  // used twice in one graph: still one accumulation
  CHECK(calls == 2);
  CHECK(seen == 12.0f + 8.0f);
}

