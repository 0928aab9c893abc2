// The kit's engine (strata/engine.hpp) on one rank: freeing storage under autograd's saved
// tensors, sharded units gathered one at a time and resharded by their plan, the lifecycle hooks
// in their documented order, and the precision policy's names.
#include "test_support.hpp"
#include "recording_comm.hpp"

#include <algorithm>
#include <functional>

#include <torch/nn/modules/linear.h>

#include "strata/comm.hpp"
#include "strata/errors.hpp"
#include "strata/precision.hpp"
#include "strata/flat_params.hpp"
#include "strata/engine.hpp"
#include "strata/logger.hpp"

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

/// Three linear units (8 -> 64 -> 4 -> 2) whose forward calls `probe`.
std::shared_ptr<strata::Model> probe_model(std::function<void()>* probe) {
  auto model = std::make_shared<strata::Model>();
  model->add_unit("u0", std::make_shared<ProbeUnit>(8, 64, probe));
  model->add_unit("u1", std::make_shared<ProbeUnit>(64, 4, probe));
  model->add_unit("u2", std::make_shared<ProbeUnit>(4, 2, probe));
  return model;
}
constexpr std::int64_t kNumels[] = {8 * 64 + 64, 64 * 4 + 4, 4 * 2 + 2};
constexpr std::int64_t kTotal = kNumels[0] + kNumels[1] + kNumels[2];

/// The engine running `plan` on one rank, with every hook recorded in `events`.
class RecordingEngine final : public strata::Engine {
 public:
  using strata::Engine::unit_plan;
  using strata::Engine::unit_state;
  RecordingEngine(strata::Plan plan, std::shared_ptr<strata::Model> model, strata::PrecisionPolicy precision = {})
      : plan_to_run_(std::move(plan)) {
    comm_storage_ = strata::make_local_comm();
    strata::StrategySetup s;
    s.model = std::move(model);
    s.optimizer.name = "sgd";
    s.comm = comm_storage_.get();
    s.log = &log_;
    s.precision = precision;
    setup(s);
  }
  void setup(const strata::StrategySetup& s) override { take_over(s, plan_to_run_); }
  std::int64_t params_held() const { return memory().params; }
  std::vector<std::string> events;

 protected:
  void before_unit_forward(std::size_t u) override {
    events.push_back("before_forward " + std::to_string(u));
    Engine::before_unit_forward(u);
  }
  void after_unit_forward(std::size_t u, bool backward) override {
    events.push_back("after_forward " + std::to_string(u));
    Engine::after_unit_forward(u, backward);
  }
  void before_unit_backward(std::size_t u) override {
    events.push_back("before_backward " + std::to_string(u));
    Engine::before_unit_backward(u);
  }
  void gradient_ready(std::size_t g) override {
    events.push_back("gradient_ready " + std::to_string(g));
    Engine::gradient_ready(g);
  }
  void after_backward(strata::MicroStep m) override {
    events.push_back("after_backward");
    Engine::after_backward(m);
  }
  void after_step() override { events.push_back("after_step"); }

 private:
  std::unique_ptr<strata::Comm> comm_storage_;
  strata::Logger log_;
  strata::Plan plan_to_run_;
};

strata::Plan sharded_plan(strata::Reshard after_forward, int prefetch) {
  strata::Plan plan;
  plan.owner = "test";
  plan.sharded = strata::Sharded::kParameters;
  plan.group_bytes = 0;
  plan.units.after_forward = after_forward;
  plan.forward_prefetch = plan.backward_prefetch = prefetch;
  return plan;
}

strata::Batch regression_batch() {
  strata::Batch batch;
  batch.inputs = torch::randn({5, 8});
  batch.targets = torch::randint(0, 2, {5});
  return batch;
}

}  // namespace

TEST_CASE("a freed storage keeps autograd's saved tensors usable once refilled") {
  auto full = torch::tensor({1.0f, 2.0f, 3.0f});
  auto w = torch::zeros({3}).requires_grad_();
  w.set_data(full);  // the parameter is a view of the flat buffer, as in the engine
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

TEST_CASE("sharded units are gathered one at a time and resharded by their plan") {
  std::function<void()> probe;
  strata::PrecisionPolicy bf16;
  bf16.param = torch::kBFloat16;  // one rank: the gathered units are bf16 copies of the masters
  for (auto after : {strata::Reshard::kShardGroup, strata::Reshard::kNone}) {
    for (int prefetch : {0, 1}) {
      CAPTURE(prefetch);
      CAPTURE(static_cast<int>(after));
      RecordingEngine engine(sharded_plan(after, prefetch), probe_model(&probe), bf16);
      CHECK(engine.params_held() == 4 * kTotal);  // only the float32 masters between steps
      std::vector<std::int64_t> seen;
      probe = [&] { seen.push_back(engine.params_held() - 4 * kTotal); };
      const auto batch = regression_batch();
      strata::MicroStep micro{0, 1, torch::ones({})};
      engine.forward_backward(batch, micro);
      probe = nullptr;
      REQUIRE(seen.size() == 3);
      std::int64_t kept = 0;
      for (std::size_t i = 0; i < 3; ++i) {
        // While unit i runs: its bf16 copy, the units kept gathered before it, and the next
        // unit's copy when prefetching.
        std::int64_t expected = 2 * kNumels[i] + kept;
        if (prefetch && i + 1 < 3) expected += 2 * kNumels[i + 1];
        CHECK(seen[i] == expected);
        if (after == strata::Reshard::kNone) kept += 2 * kNumels[i];
      }
      CHECK(engine.params_held() == 4 * kTotal);  // every unit freed after its backward
      CHECK(engine.memory().grads == 4 * kTotal);  // the gradient shards
      CHECK(engine.finish_gradients(1e9).item<double>() > 0);
    }
  }
}

TEST_CASE("the engine calls its lifecycle hooks in their documented order") {
  std::function<void()> probe;
  RecordingEngine engine(sharded_plan(strata::Reshard::kShardGroup, 1), probe_model(&probe));
  engine.forward_backward(regression_batch(), {0, 1, torch::ones({})});
  engine.step(0.1);
  // Backward runs the units in reverse; a unit's gradients are ready after its pre-backward hook.
  const std::vector<std::string> expected{
      "before_forward 0", "after_forward 0", "before_forward 1", "after_forward 1", "before_forward 2",
      "after_forward 2",  "before_backward 2", "gradient_ready 2", "before_backward 1", "gradient_ready 1",
      "before_backward 0", "gradient_ready 0", "after_backward", "after_step"};
  CHECK(engine.events == expected);
  for (const auto& p : engine.model().parameters()) CHECK_FALSE(p.grad().defined());  // handed to the shards
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

TEST_CASE("sharded parameters refuse parameters outside every unit, and a tied one is placed with its first unit") {
  std::function<void()> probe;
  {
    auto model = std::make_shared<strata::Model>();
    model->add_unit("u0", std::make_shared<ProbeUnit>(4, 4, &probe));
    model->register_parameter("temperature", torch::ones({1}));
    try {
      RecordingEngine engine(sharded_plan(strata::Reshard::kShardGroup, 1), model);
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
    {
      RecordingEngine engine(sharded_plan(strata::Reshard::kShardGroup, 1), model);
      // u1 reads u0's weight: u0 holds it and stays gathered until u1 has run (and its backward).
      CHECK(engine.unit_state(1).reads_from == std::vector<std::size_t>{0});
      CHECK(engine.unit_state(0).read_until == 1);
      CHECK(engine.unit_plan(0).after_forward == strata::Reshard::kNone);
      CHECK(engine.unit_state(1).groups.size() == 1);  // its own bias (and no second copy of the weight)
    }
    model->set_activation_checkpointing(2);  // units 0 and 2...: u0 only, which reads nothing
    { RecordingEngine engine(sharded_plan(strata::Reshard::kShardGroup, 1), model); }
    model->set_activation_checkpointing(1);  // u1 too: its nested backward would report the tie early
    try {
      RecordingEngine engine(sharded_plan(strata::Reshard::kShardGroup, 1), model);
      FAIL("a checkpointed unit reading a tied parameter was accepted");
    } catch (const strata::Error& e) {
      CHECK(std::string(e.what()).find("unit u1 reads a parameter of unit u0") != std::string::npos);
    }
  }
}

namespace {

class TwoRankEngine final : public strata::Engine {
 public:
  TwoRankEngine(strata::Plan plan, std::shared_ptr<strata::Model> model, std::vector<std::string>* log)
      : plan_to_run_(std::move(plan)), comm_storage_(log, /*waits=*/true) {
    strata::StrategySetup s;
    s.model = std::move(model);
    s.optimizer.name = "sgd";
    s.comm = &comm_storage_;
    s.log = &log_;
    setup(s);
  }
  void setup(const strata::StrategySetup& s) override { take_over(s, plan_to_run_); }

 private:
  strata::Plan plan_to_run_;
  strata::test::RecordingComm comm_storage_;
  strata::Logger log_;
};

}  // namespace

TEST_CASE("zero1/zero2's parameters are gathered after the step in forward order and waited for unit by unit") {
  // One flat group per parameter: in reverse parameter order g0 = u2.bias (2), g1 = u2.weight (8),
  // g2 = u1.bias (4), g3 = u1.weight (256), g4 = u0.bias (64), g5 = u0.weight (512).
  for (const bool per_unit : {true, false}) {
    CAPTURE(per_unit);
    std::vector<std::string> log;
    std::function<void()> probe;
    strata::Plan plan;
    plan.owner = "test";
    plan.sharded = strata::Sharded::kGradients;
    plan.group_bytes = 1;
    plan.wait_params_per_unit = per_unit;
    TwoRankEngine engine(plan, probe_model(&probe), &log);
    std::size_t unit = 0;
    probe = [&] { log.push_back("forward " + std::to_string(unit++)); };
    engine.forward_backward(regression_batch(), {0, 1, torch::ones({})});
    engine.step(0.1);
    log.clear();
    unit = 0;
    engine.forward_backward(regression_batch(), {0, 1, torch::ones({})});
    engine.step(0.1);
    // The parameters' all-gathers and the forwards (the reductions of backward left out).
    log.erase(std::remove_if(log.begin(), log.end(),
                             [](const std::string& e) {
                               return e.find("all_gather") == std::string::npos && e.rfind("forward", 0) != 0;
                             }),
              log.end());
    const std::vector<std::string> issued_after_step{
        "all_gather 512", "all_gather 64", "all_gather 256", "all_gather 4", "all_gather 8", "all_gather 2"};
    if (per_unit) {
      // The previous step's gathers, the first unit's first; each unit's forward waits for its own.
      const std::vector<std::string> expected{
          "wait all_gather 512", "wait all_gather 64", "forward 0", "wait all_gather 256", "wait all_gather 4",
          "forward 1", "wait all_gather 8", "wait all_gather 2", "forward 2"};
      REQUIRE(log.size() == expected.size() + issued_after_step.size());
      CHECK(std::vector<std::string>(log.begin(), log.begin() + 9) == expected);
      CHECK(std::vector<std::string>(log.begin() + 9, log.end()) == issued_after_step);
      // What reads every parameter waits for all of them first.
      log.clear();
      CHECK(engine.replica_digests().size() == 1);
      CHECK(log == std::vector<std::string>{"wait all_gather 512", "wait all_gather 64", "wait all_gather 256",
                                            "wait all_gather 4", "wait all_gather 8", "wait all_gather 2"});
    } else {
      // In reverse parameter order, every one waited for before step() returns.
      REQUIRE(log.size() == 3 + 12);
      CHECK(std::vector<std::string>(log.begin(), log.begin() + 3) ==
            std::vector<std::string>{"forward 0", "forward 1", "forward 2"});
      CHECK(log[3] == "all_gather 2");
      CHECK(log[8] == "all_gather 512");
      CHECK(log[9] == "wait all_gather 2");
      CHECK(log.back() == "wait all_gather 512");
    }
  }
}
