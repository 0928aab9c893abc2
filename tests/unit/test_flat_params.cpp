// The one flat layout of every strategy (strata::FlatGroup) and the gradient reducer over it, on
// one rank: layout and padding, aliasing of masters, float32 accumulation under a bf16 policy,
// staging of sharded gradients, and the reducer's handling of missing gradients.
#include "test_support.hpp"
#include "recording_comm.hpp"

#include "strata/errors.hpp"
#include "strata/flat_params.hpp"
#include "strata/buckets.hpp"
#include "strata/grad_reducer.hpp"

namespace {

using strata::test::make_params;

strata::FlatGroupOptions group_options(int rank, int n, strata::Residency residency, strata::GradHolding grads,
                                 torch::ScalarType param = torch::kFloat32) {
  strata::PrecisionPolicy policy;
  policy.param = param;
  return {rank, n, residency, grads, strata::Precision(policy)};
}

}  // namespace

TEST_CASE("a flat group pads to the shard size, owns one chunk and keeps the parameters as views") {
  auto params = make_params({5, 3});
  const auto values = torch::cat({params[0].detach().clone(), params[1].detach().clone()});
  strata::FlatGroup g(params, {"a", "b"}, group_options(1, 3, strata::Residency::kPersistent, strata::GradHolding::kFull));
  CHECK(g.numel() == 8);
  CHECK(g.padded() == 9);
  CHECK(g.chunk() == 3);
  CHECK(torch::equal(params[0].detach(), values.narrow(0, 0, 5)));  // values kept
  CHECK(g.full()[8].item<float>() == 0.0f);                          // padding is zero
  CHECK(g.aliased());  // float32 and persistent: the master is the owned chunk itself
  CHECK(g.master().data_ptr<float>() == g.full().data_ptr<float>() + 3);
  {
    torch::NoGradGuard no_grad;
    g.full().fill_(7.0f);
  }
  CHECK(params[0].sum().item<float>() == 35.0f);  // the parameters are views
  auto other = torch::arange(9.0f);
  CHECK(g.chunk_of(other, 2)[0].item<float>() == 6.0f);
  CHECK(g.views(other)[1].sizes() == params[1].sizes());
  // kFull: autograd accumulates straight into the float32 buffer, whose owned chunk is the master's grad.
  (params[1] * 2).sum().backward();
  CHECK(g.full_grad()[5].item<float>() == 2.0f);
  CHECK(g.master().grad().data_ptr<float>() == g.full_grad().data_ptr<float>() + 3);
  g.zero_grad();
  CHECK(g.full_grad().abs().sum().item<float>() == 0.0f);
  CHECK(strata::storage_bytes(g.param_tensors()) == 9 * 4);  // one storage: full and its master view
  // zero1/zero2's all-gather after the step runs in place: its input is the owned chunk of full(),
  // not a copy of it.
  const auto input = g.gather_input();
  CHECK(input.is_alias_of(g.full()));
  CHECK(input.data_ptr<float>() == g.full().data_ptr<float>() + 3);
  CHECK(input.numel() == 3);
}

TEST_CASE("under a bf16 policy the master is a float32 copy and gradients accumulate in float32") {
  auto params = make_params({4});
  strata::FlatGroup g(params, {"w"},
                      group_options(0, 1, strata::Residency::kPersistent, strata::GradHolding::kFull, torch::kBFloat16));
  CHECK_FALSE(g.aliased());
  CHECK((params[0].scalar_type() == torch::kBFloat16));
  CHECK((g.master().scalar_type() == torch::kFloat32));
  CHECK(strata::storage_bytes(g.param_tensors()) == 4 * 2 + 4 * 4);
  // 1 + 2^-9 is not a bfloat16 value: summed in bf16 twice it would round away, in float32 it stays.
  for (int i = 0; i < 2; ++i) {
    params[0].mutable_grad() = torch::full({4}, 1.0f + 1.0f / 512, torch::kFloat32).to(torch::kBFloat16);
    g.accumulate(0);
    CHECK_FALSE(params[0].grad().defined());  // handed to the float32 buffer
  }
  CHECK(g.full_grad()[0].item<float>() == 2.0f);  // bf16(1 + 2^-9) == 1: what matters is the float32 sum
  params[0].mutable_grad() = torch::full({4}, 0.5f + 1.0f / 256, torch::kFloat32).to(torch::kBFloat16);
  g.accumulate(0);
  CHECK(g.full_grad()[0].item<float>() == 2.0f + 0.5f + 1.0f / 256);
  {
    torch::NoGradGuard no_grad;
    g.master().fill_(1.5f);
  }
  g.master_to_full();
  CHECK(params[0][0].item<float>() == 1.5f);
}

TEST_CASE("a gathered group frees its full parameters and stages sharded gradients with zero padding") {
  auto params = make_params({3, 2});
  strata::FlatGroup g(params, {"a", "b"}, group_options(0, 2, strata::Residency::kGathered, strata::GradHolding::kShard));
  CHECK_FALSE(g.materialized());
  CHECK(strata::storage_bytes(g.param_tensors()) == 3 * 4);  // only this rank's master chunk
  CHECK(torch::equal(g.master(), torch::tensor({1.0f, 2.0f, 3.0f})));
  CHECK(g.master().grad().numel() == 3);
  g.allocate_full();
  CHECK(g.materialized());
  auto input = g.gather_input();
  CHECK(torch::equal(input, g.master()));
  g.release_full();
  CHECK_FALSE(g.materialized());
  params[1].mutable_grad() = torch::tensor({5.0f, 6.0f});  // parameter a got no gradient: zeros
  auto staged = g.take_grads(torch::kFloat32);
  CHECK(torch::equal(staged, torch::tensor({0.0f, 0.0f, 0.0f, 5.0f, 6.0f, 0.0f})));
  CHECK_FALSE(params[1].grad().defined());
  // Staged in the reduce dtype, cast as they are copied in.
  params[0].mutable_grad() = torch::tensor({1.5f, 2.5f, 3.5f});
  params[1].mutable_grad() = torch::tensor({4.5f, 5.5f});
  const auto narrow = g.take_grads(torch::kBFloat16);
  CHECK((narrow.scalar_type() == torch::kBFloat16));
  CHECK(torch::equal(narrow, torch::tensor({1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 0.0f}).to(torch::kBFloat16)));
  CHECK_THROWS_AS(strata::FlatGroup({torch::zeros({2}, torch::kFloat64).requires_grad_()}, {"x"},
                                    group_options(0, 1, strata::Residency::kPersistent, strata::GradHolding::kFull)),
                  strata::Error);
}

namespace {
/// What the engine does for its reducer: grad-ready hooks that report each gradient of the groups
/// (in launch order) as it arrives. Destroy them before the reducer.
std::vector<std::unique_ptr<strata::GradReadyHook>> feed(strata::Reducer& reducer,
                                                         const std::vector<strata::FlatGroup*>& launch) {
  std::vector<std::unique_ptr<strata::GradReadyHook>> hooks;
  for (std::size_t g = 0; g < launch.size(); ++g)
    for (std::size_t k = 0; k < launch[g]->size(); ++k)
      hooks.push_back(strata::add_grad_ready_hook(launch[g]->param(k), [&reducer, g, k] { reducer.gradient_arrived(g, k); }));
  return hooks;
}
}  // namespace

TEST_CASE("the reducer accumulates in float32, names parameters without a gradient, or counts them as zero") {
  auto params = make_params({2, 2});
  auto local = strata::make_local_comm();
  strata::PrecisionPolicy policy;
  strata::FlatGroup g(params, {"used", "spare"},
                      group_options(0, 1, strata::Residency::kPersistent, strata::GradHolding::kShard));
  strata::GradReducerOptions o;
  o.owner = "test";
  o.missing_fix = "use every parameter";
  {
    strata::GradReducer reducer({&g}, strata::Precision(policy), o);
    const auto hooks = feed(reducer, {&g});
    reducer.begin_backward({0, 1, {}});
    (params[0] * 3).sum().backward();
    try {
      reducer.end_backward({0, 1, {}});
      FAIL("a parameter without a gradient was not reported");
    } catch (const strata::Error& e) {
      CHECK(std::string(e.what()).find("spare") != std::string::npos);
      CHECK(std::string(e.what()).find("received no gradient") != std::string::npos);
      CHECK(e.fix() == "use every parameter");
    }
  }
  o.allow_missing = true;
  strata::GradReducer reducer({&g}, strata::Precision(policy), o);
  const auto hooks = feed(reducer, {&g});
  for (int m = 0; m < 2; ++m) {  // two micro-batches accumulate into the shard
    reducer.begin_backward({m, 2, {}});
    (params[0] * 3).sum().backward();
    reducer.end_backward({m, 2, {}});
  }
  CHECK(torch::equal(g.master().grad(), torch::tensor({6.0f, 6.0f, 0.0f, 0.0f})));
  CHECK(reducer.in_flight_bytes() == 0);  // every staged buffer released
}

namespace {

using strata::test::RecordingComm;

}  // namespace

TEST_CASE("sharded gradients are averaged over the replicas while backward goes on, once a step") {
  // NO_SHARD / HYBRID_SHARD's layout: shards of one rank (kShard, shard size 1), averaged over a
  // replicate group of two. Three groups complete in backward in the order p2, p1, p0; with one
  // reduction in flight, launching p1's completes p2's, whose average must go out then, before
  // p0's gradient exists, not after the whole backward.
  auto params = make_params({3, 2, 4});
  strata::PrecisionPolicy policy;
  std::vector<std::unique_ptr<strata::FlatGroup>> groups;
  for (std::size_t i = 0; i < 3; ++i)
    groups.push_back(std::make_unique<strata::FlatGroup>(
        std::vector<torch::Tensor>{params[i]}, std::vector<std::string>{"p" + std::to_string(i)},
        group_options(0, 1, strata::Residency::kPersistent, strata::GradHolding::kShard)));
  std::vector<std::string> log;
  RecordingComm replicas(&log);
  strata::GradReducerOptions o;
  o.replicate = &replicas;
  o.max_in_flight = 1;
  strata::GradReducer reducer({groups[2].get(), groups[1].get(), groups[0].get()}, strata::Precision(policy), o);
  const auto hooks = feed(reducer, {groups[2].get(), groups[1].get(), groups[0].get()});
  std::size_t issued_before_p0 = 0;
  params[0].register_hook([&](const torch::Tensor& g) {
    issued_before_p0 = log.size();
    return g;
  });
  auto loss = [&] {
    const auto s0 = (params[0] * 2).sum();
    const auto s1 = (params[1] * s0).sum();
    return (params[2] * s1).sum();
  };
  for (int m = 0; m < 2; ++m) {
    reducer.begin_backward({m, 2, {}});
    loss().backward();
    reducer.end_backward({m, 2, {}});
    if (m == 0) CHECK(log.empty());  // the first micro-batch only accumulates
  }
  CHECK(issued_before_p0 == 1);
  REQUIRE(log.size() == 3);  // one average per group and step, in the order backward completed them
  CHECK(log[0] == "all_reduce 4");
  CHECK(log[1] == "all_reduce 2");
  CHECK(log[2] == "all_reduce 3");
  // The identity over the replicas: each shard holds its two micro-batches' gradients
  // (s0 = 2 x 6 = 12, s1 = 9 x 12 = 108, the loss 30 x 108).
  CHECK(torch::equal(groups[0]->master().grad(), torch::full({3}, 2 * 30.0f * 9 * 2)));
  CHECK(torch::equal(groups[1]->master().grad(), torch::full({2}, 2 * 30.0f * 12)));
  CHECK(torch::equal(groups[2]->master().grad(), torch::full({4}, 2 * 108.0f)));
  CHECK(reducer.in_flight_bytes() == 0);
}
