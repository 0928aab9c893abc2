// Per-unit sharding (strata/unit_shards.hpp): freeing storage under autograd's saved tensors,
// gathering one unit at a time, and the precision policy's names.
#include "test_support.hpp"

#include <functional>

#include <torch/nn/modules/linear.h>

#include "strata/comm.hpp"
#include "strata/errors.hpp"
#include "strata/precision.hpp"
#include "strata/flat_params.hpp"
#include "strata/unit_shards.hpp"

namespace {

/// A linear unit that reports what the shards hold while it runs.
class ProbeUnit final : public strata::Unit {
 public:
  ProbeUnit(std::int64_t in, std::int64_t out, std::function<void()>* probe)
      : linear_(register_module("linear", torch::nn::Linear(in, out))), probe_(probe) {}
  torch::Tensor forward(const torch::Tensor& x, const strata::BatchContext&) override {
    if (*probe_) (*probe_)();
    return linear_->forward(x);
  }

 private:
  torch::nn::Linear linear_;
  std::function<void()>* probe_;
};

}  // namespace

TEST_CASE("a freed storage keeps autograd's saved tensors usable once refilled") {
  auto full = torch::tensor({1.0f, 2.0f, 3.0f});
  auto w = torch::zeros({3}).requires_grad_();
  w.set_data(full);  // the parameter is a view of the flat buffer, as in UnitShards
  auto y = (w * w).sum();  // saves w for backward
  strata::free_storage(full);
  CHECK(full.storage().nbytes() == 0);
  CHECK(strata::storage_bytes({w, full}) == 0);
  strata::reallocate_storage(full, 3 * sizeof(float));
  full.copy_(torch::tensor({10.0f, 20.0f, 30.0f}));  // the "gather"
  y.backward();
  // d/dw sum(w^2) = 2w, computed from the refilled storage.
  CHECK(torch::equal(w.grad(), torch::tensor({20.0f, 40.0f, 60.0f})));
  CHECK(strata::storage_bytes({w, full, w.view({3})}) == 12);  // one storage, counted once
}

TEST_CASE("units are gathered one at a time and freed after forward and backward") {
  std::function<void()> probe;
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes{{8, 64}, {64, 4}, {4, 2}};
  std::vector<std::int64_t> numels;
  for (const auto& [in, out] : shapes) numels.push_back(in * out + out);
  std::int64_t total = 0;
  for (auto n : numels) total += n;
  auto comm = strata::make_local_comm();
  strata::UnitShardOptions options;
  options.precision.param = torch::kBFloat16;  // one rank: the gathered units are bf16 copies
  for (int prefetch : {0, 1}) {
    CAPTURE(prefetch);
    options.forward_prefetch = options.backward_prefetch = prefetch;
    auto model = std::make_shared<strata::Model>();  // a fresh model: shards take theirs over
    const char* names[] = {"u0", "u1", "u2"};
    for (std::size_t i = 0; i < shapes.size(); ++i)
      model->add_unit(names[i], std::make_shared<ProbeUnit>(shapes[i].first, shapes[i].second, &probe));
    strata::UnitShards shards(model, torch::kCPU, *comm, *comm, nullptr, options);
    CHECK(shards.held_bytes().first == 4 * total);  // only the float32 masters between steps
    std::vector<std::int64_t> seen;
    probe = [&] { seen.push_back(shards.held_bytes().first - 4 * total); };
    auto out = shards.forward(torch::randn({5, 8}), {}, /*train=*/true);
    probe = nullptr;
    REQUIRE(seen.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      // While unit i runs: its bf16 copy, plus the next unit's when prefetching.
      std::int64_t expected = 2 * numels[i];
      if (prefetch && i + 1 < 3) expected += 2 * numels[i + 1];
      CHECK(seen[i] == expected);
    }
    CHECK(shards.held_bytes().first == 4 * total);  // reshard_after_forward
    shards.begin_backward({0, 1, {}});
    out.to(torch::kFloat32).sum().backward();
    shards.end_backward({0, 1, {}});
    CHECK(shards.held_bytes() == std::make_pair(4 * total, 4 * total));  // masters and gradient shards
    CHECK(shards.grad_square_norm().item<double>() > 0);
    for (const auto& p : model->parameters()) CHECK_FALSE(p.grad().defined());  // handed to the shards
  }
}

TEST_CASE("precision policy names") {
  CHECK(strata::dtype_name(strata::dtype_from_name("bfloat16")) == "bfloat16");
  CHECK(strata::dtype_name(torch::kFloat32) == "float32");
  CHECK_THROWS_AS(strata::dtype_from_name("float8"), strata::Error);
  strata::PrecisionPolicy policy;
  CHECK(policy.describe() == "float32 throughout");
  policy.param = torch::kBFloat16;
  CHECK(policy.mixed());
  CHECK(policy.describe().find("parameters bfloat16") != std::string::npos);
}

TEST_CASE("zero3 and fsdp refuse parameters outside every unit and tied parameters, by name") {
  auto comm = strata::make_local_comm();
  std::function<void()> probe;
  {
    auto model = std::make_shared<strata::Model>();
    model->add_unit("u0", std::make_shared<ProbeUnit>(4, 4, &probe));
    model->register_parameter("temperature", torch::ones({1}));
    try {
      strata::UnitShards shards(model, torch::kCPU, *comm, *comm, nullptr, {});
      FAIL("a parameter outside the units was accepted");
    } catch (const strata::Error& e) {
      CHECK(std::string(e.what()).find("temperature") != std::string::npos);
    }
  }
  {
    auto model = std::make_shared<strata::Model>();
    auto a = std::make_shared<ProbeUnit>(4, 4, &probe);
    auto b = std::make_shared<ProbeUnit>(4, 4, &probe);
    b->register_parameter("shared", a->named_parameters()["linear.weight"]);
    model->add_unit("u0", a);
    model->add_unit("u1", b);
    try {
      strata::UnitShards shards(model, torch::kCPU, *comm, *comm, nullptr, {});
      FAIL("a tied parameter was accepted");
    } catch (const strata::Error& e) {
      CHECK(std::string(e.what()).find("u1.shared = u0.linear.weight") != std::string::npos);
    }
  }
}
