// Gradient buckets, grad-ready hooks and the bucket-sharded flat layout (SDK helpers of ddp and
// the ZeRO strategies).
#include "test_support.hpp"

#include "strata/buckets.hpp"
#include "strata/flat_shard.hpp"

namespace {
std::vector<torch::Tensor> make_params(std::initializer_list<std::int64_t> sizes) {
  std::vector<torch::Tensor> params;
  float start = 1.0f;
  for (auto n : sizes) {
    params.push_back(torch::arange(start, start + static_cast<float>(n)).requires_grad_());
    start += static_cast<float>(n);
  }
  return params;
}
}  // namespace

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

TEST_CASE("a gradient bucket makes the grads views of one flat buffer") {
  auto params = make_params({3, 2});
  strata::GradBucket bucket{{1, 0}, {}};
  bucket.bind(params);
  CHECK(bucket.flat.numel() == 5);
  (params[0] * 2).sum().backward();
  // Autograd accumulated straight into the flat buffer: param 1 first, then param 0.
  CHECK(bucket.flat[2].item<float>() == 2.0f);
  CHECK(bucket.flat[0].item<float>() == 0.0f);
  bucket.flat.zero_();
  CHECK(params[0].grad().sum().item<float>() == 0.0f);
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

TEST_CASE("sharded buckets pad to the world size and own one chunk each") {
  auto params = make_params({5, 3});
  const auto values = torch::cat({params[0].detach().clone(), params[1].detach().clone()});
  auto buckets = strata::build_sharded_buckets(params, 1 << 20, /*rank=*/1, /*world=*/3);
  REQUIRE(buckets.size() == 1);
  const auto& b = buckets[0];
  CHECK(b.numel == 8);
  CHECK(b.padded == 9);
  CHECK(b.chunk == 3);
  // Values kept; parameter order in the bucket is reverse (1, then 0); padding is zero.
  CHECK(torch::equal(params[0].detach(), values.narrow(0, 0, 5)));
  CHECK(b.flat_params[8].item<float>() == 0.0f);
  CHECK(b.flat_params[0].item<float>() == values[5].item<float>());
  // Parameters are views: writing the flat tensor changes them.
  {
    torch::NoGradGuard no_grad;
    b.flat_params.fill_(7.0f);
  }
  CHECK(params[0].sum().item<float>() == 35.0f);
  CHECK(b.owned_params().numel() == 3);
  CHECK(b.owned_params().data_ptr<float>() == b.flat_params.data_ptr<float>() + 3);
  auto other = torch::arange(9.0f);
  CHECK(b.chunk_of(other, 2)[0].item<float>() == 6.0f);
  auto views = b.param_views(other, params);
  CHECK(views[1].sizes() == params[0].sizes());
  CHECK(views[0][0].item<float>() == 0.0f);
}
