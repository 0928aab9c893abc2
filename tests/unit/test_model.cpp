// Model units, optimizer helpers, learning-rate schedules and the one-rank communicator.
#include "test_support.hpp"

#include <array>
#include <cmath>
#include <map>

#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "strata/comm.hpp"
#include "strata/errors.hpp"
#include "strata/model.hpp"
#include "strata/optim.hpp"
#include "train/schedule.hpp"

namespace {
class Scale final : public strata::Unit {
 public:
  explicit Scale(double f) : f_(f) { w_ = register_parameter("w", torch::ones({2})); }
  torch::Tensor forward(const torch::Tensor& x, const strata::BatchContext&) override { return x * w_ * f_; }

 private:
  torch::Tensor w_;
  double f_;
};
}  // namespace

TEST_CASE("a model runs its units in order and registers their parameters in order") {
  strata::Model m;
  m.add_unit("first", std::make_shared<Scale>(2.0));
  m.add_unit("second", std::make_shared<Scale>(3.0));
  CHECK(m.units().size() == 2);
  CHECK(m.unit_names() == std::vector<std::string>{"first", "second"});
  CHECK(m.parameter_count() == 4);
  auto y = m.forward(torch::ones({1, 2}));
  CHECK(y[0][0].item<double>() == doctest::Approx(6.0));
  auto names = m.named_parameters().keys();
  CHECK(names == std::vector<std::string>{"first.w", "second.w"});
}

namespace {
std::map<std::string, double> host_sums(const strata::MetricSums& sums) {
  std::map<std::string, double> out;
  for (const auto& [name, value] : sums) out[name] = value.item<double>();
  return out;
}
}  // namespace

namespace {
/// Linear, tanh, linear: keeps activations inside the unit besides its input; counts its forwards.
class Block final : public strata::Unit {
 public:
  explicit Block(int* forwards) : forwards_(forwards) {
    a_ = register_module("a", torch::nn::Linear(4, 8));
    b_ = register_module("b", torch::nn::Linear(8, 4));
  }
  torch::Tensor forward(const torch::Tensor& x, const strata::BatchContext&) override {
    ++*forwards_;
    return b_->forward(torch::tanh(a_->forward(x)));
  }

 private:
  torch::nn::Linear a_{nullptr}, b_{nullptr};
  int* forwards_;
};

std::vector<torch::Tensor> gradients_of(int checkpoint_every, int* forwards) {
  torch::manual_seed(3);
  strata::Model m;
  for (int u = 0; u < 3; ++u) m.add_unit("u" + std::to_string(u), std::make_shared<Block>(forwards));
  m.set_activation_checkpointing(checkpoint_every);
  const auto x = torch::linspace(-1, 1, 24).reshape({6, 4});
  m.forward(x).square().sum().backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : m.parameters()) grads.push_back(p.grad().clone());
  return grads;
}
}  // namespace

TEST_CASE("checkpointed units recompute their forward in backward and give the same gradients exactly") {
  int plain_forwards = 0, full_forwards = 0, every2_forwards = 0;
  const auto plain = gradients_of(0, &plain_forwards);
  const auto full = gradients_of(1, &full_forwards);
  const auto every2 = gradients_of(2, &every2_forwards);
  CHECK(plain_forwards == 3);
  CHECK(full_forwards == 6);    // each unit once more, in backward
  CHECK(every2_forwards == 5);  // units 0 and 2
  REQUIRE(plain.size() == full.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    CHECK(torch::equal(plain[i], full[i]));
    CHECK(torch::equal(plain[i], every2[i]));
  }
  // Without grad (evaluation) nothing is recomputed.
  strata::Model m;
  int forwards = 0;
  m.add_unit("u", std::make_shared<Block>(&forwards));
  m.set_activation_checkpointing(1);
  torch::NoGradGuard no_grad;
  m.forward(torch::ones({1, 4}));
  CHECK(forwards == 1);
}

TEST_CASE("default loss is summed cross-entropy and the metrics are accuracy and, for two classes, F1") {
  strata::Model m;
  auto logits = torch::tensor({{2.0, 0.0}, {0.0, 3.0}, {1.0, 0.0}});
  strata::Batch batch{logits, torch::tensor({0, 1, 1}, torch::kInt64), {}};
  auto sums = host_sums(m.metric_sums(logits, batch));
  CHECK(sums["correct"] == 2);
  CHECK(sums["total"] == 3);
  CHECK(sums["tp"] == 1);
  CHECK(sums["fp"] == 0);
  CHECK(sums["fn"] == 1);
  const auto metrics = m.finalize_metrics(sums, 0.0);
  REQUIRE(metrics.size() == 2);
  CHECK(metrics[0].first == "accuracy");
  CHECK(metrics[0].second == doctest::Approx(2.0 / 3));
  CHECK(metrics[1].first == "f1");
  CHECK(metrics[1].second == doctest::Approx(2.0 / 3));  // 2tp / (2tp + fp + fn) = 2 / 3
  const double expected =
      std::log(1 + std::exp(-2.0)) + std::log(1 + std::exp(-3.0)) + std::log(1 + std::exp(1.0));
  CHECK(m.loss(logits, batch).item<double>() == doctest::Approx(expected));
  CHECK(batch.target_count().item<double>() == 3);
}

TEST_CASE("token targets: ignored elements count for nothing in loss, metrics and the normalizer") {
  strata::Model m;
  auto logits = torch::randn({2, 3, 5});
  auto targets = torch::tensor(std::vector<std::int64_t>{1, 2, strata::kIgnoreIndex, strata::kIgnoreIndex, 4, 0}).reshape({2, 3});
  strata::Batch batch{torch::zeros({2, 3}, torch::kInt64), targets, {}};
  CHECK(batch.target_count().item<double>() == 4);
  double expected = 0;
  const auto logp = logits.log_softmax(-1);
  for (auto [i, t, c] : std::vector<std::array<std::int64_t, 3>>{{0, 0, 1}, {0, 1, 2}, {1, 1, 4}, {1, 2, 0}})
    expected -= logp[i][t][c].item<double>();
  CHECK(m.loss(logits, batch).item<double>() == doctest::Approx(expected));
  auto sums = host_sums(m.metric_sums(logits, batch));
  CHECK(sums["total"] == 4);
  CHECK(sums.count("tp") == 0);  // five classes: no F1
}

TEST_CASE("the batch context: a boolean mask and positions that start at each sequence's first token") {
  strata::Batch batch;
  batch.inputs = torch::zeros({2, 4}, torch::kInt64);
  batch.mask = torch::tensor({{0, 0, 1, 1}, {1, 1, 1, 0}}, torch::kInt64);
  const auto c = strata::BatchContext::of(batch);
  CHECK((c.mask.scalar_type() == torch::kBool));
  CHECK(torch::equal(c.positions, torch::tensor({{0, 0, 0, 1}, {0, 1, 2, 2}}, torch::kInt64)));
  CHECK_FALSE(strata::BatchContext::of(strata::Batch{batch.inputs, {}, {}}).mask.defined());
  const auto half = batch.slice(1, 2);
  CHECK(half.size() == 1);
  CHECK(torch::equal(half.mask, batch.mask.slice(0, 1, 2)));
}

TEST_CASE("optimizer state bytes are measured from the tensors the optimizer holds") {
  torch::nn::Linear layer(10, 5);  // 55 parameters in two tensors
  auto params = layer->parameters();
  strata::OptimizerSpec adamw;
  auto opt = strata::make_optimizer(params, adamw);
  CHECK(opt->state_bytes() == 0);  // lazily allocated
  layer->forward(torch::ones({3, 10})).sum().backward();
  opt->step(1e-3);
  CHECK(opt->state_bytes() == 2 * 55 * 4 + 2 * 4);  // two moments per element, a float32 step count per tensor
  REQUIRE(opt->state().size() == 3);
  CHECK(opt->state()[2].first == "step");
  CHECK(opt->state()[2].second[0].item<float>() == 1.0f);
  strata::OptimizerSpec sgd;
  sgd.name = "sgd";
  auto opt2 = strata::make_optimizer(params, sgd);
  opt2->step(0.5);
  CHECK(opt2->state_bytes() == 55 * 4);
  CHECK(strata::tensor_bytes(params) == 55 * 4);
  CHECK_THROWS_AS(strata::make_optimizer({torch::zeros({2}, torch::kFloat64)}, sgd), strata::Error);
  sgd.name = "lamb";
  CHECK_THROWS_AS(strata::make_optimizer(params, sgd), strata::Error);
}

namespace {
/// Runs `steps` updates of Strata's optimizer and of LibTorch's torch::optim one on the same
/// tensors and gradients; returns the largest relative difference of the parameters.
double optimizer_drift(const strata::OptimizerSpec& spec, int steps) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> ours, theirs;
  for (auto n : {7, 130, 1}) {
    auto t = torch::randn({n});
    ours.push_back(t.clone().requires_grad_());
    theirs.push_back(t.clone().requires_grad_());
  }
  auto mine = strata::make_optimizer(ours, spec);
  std::unique_ptr<torch::optim::Optimizer> reference;
  if (spec.name == "sgd")
    reference = std::make_unique<torch::optim::SGD>(
        theirs, torch::optim::SGDOptions(spec.lr).momentum(spec.momentum).weight_decay(spec.weight_decay));
  else
    reference = std::make_unique<torch::optim::AdamW>(
        theirs, torch::optim::AdamWOptions(spec.lr).betas({spec.betas[0], spec.betas[1]}).eps(spec.eps).weight_decay(
                    spec.weight_decay));
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < ours.size(); ++i) {
      auto g = torch::randn(ours[i].sizes());
      ours[i].mutable_grad() = g.clone();
      theirs[i].mutable_grad() = g.clone();
    }
    mine->step(spec.lr);
    reference->step();
  }
  double worst = 0;
  for (std::size_t i = 0; i < ours.size(); ++i)
    worst = std::max(worst, ((ours[i] - theirs[i]).abs() / theirs[i].abs().clamp_min(1e-3)).max().item<double>());
  return worst;
}
}  // namespace

TEST_CASE("foreach SGD and AdamW equal LibTorch's exactly, fused AdamW is within 1e-6 relative") {
  strata::OptimizerSpec sgd;
  sgd.name = "sgd";
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  sgd.weight_decay = 0.01;
  CHECK(optimizer_drift(sgd, 30) == 0.0);
  sgd.momentum = 0;
  sgd.weight_decay = 0;
  CHECK(optimizer_drift(sgd, 30) == 0.0);
  strata::OptimizerSpec adamw;
  adamw.lr = 1e-2;
  adamw.weight_decay = 0.01;
  CHECK(optimizer_drift(adamw, 30) == 0.0);
  adamw.fused = true;
  const double drift = optimizer_drift(adamw, 30);
  MESSAGE("fused AdamW: largest relative difference after 30 steps " << drift);
  CHECK(drift < 1e-6);
}

TEST_CASE("gradient norm and clipping follow torch.nn.utils.clip_grad_norm_, on the device") {
  auto g = torch::tensor({3.0f, 4.0f});
  std::vector<torch::Tensor> grads{g, torch::Tensor()};
  const auto norm = strata::square_sum(grads, torch::kCPU).sqrt();
  CHECK((norm.scalar_type() == torch::kFloat64));
  CHECK(norm.item<double>() == doctest::Approx(5.0));
  strata::clip_gradients(grads, norm, 10.0);  // below the limit: an exact multiply by 1
  CHECK(g[0].item<float>() == 3.0f);
  strata::clip_gradients(grads, norm, 1.0);
  CHECK(strata::square_sum(grads, torch::kCPU).sqrt().item<double>() == doctest::Approx(1.0).epsilon(1e-5));
  strata::clip_gradients(grads, norm, 0.0);  // 0 disables clipping
  CHECK(strata::square_sum({}, torch::kCPU).item<double>() == 0.0);
  auto comm = strata::make_local_comm();
  CHECK(strata::global_square_sum({torch::ones({4})}, *comm).item<double>() == 4.0);
}

TEST_CASE("warmup then cosine decay reaches the floor at the last step") {
  strata::LrSchedule s{1.0, 110, 10, true, 0.1};
  CHECK(s.at(0) == doctest::Approx(0.1));
  CHECK(s.at(9) == doctest::Approx(1.0));
  CHECK(s.at(10) == doctest::Approx(1.0));
  CHECK(s.at(109) == doctest::Approx(0.1));
  CHECK(s.at(60) < 1.0);
  strata::LrSchedule constant{0.5, 100, 0, false, 0.0};
  CHECK(constant.at(99) == 0.5);
}

TEST_CASE("every collective refuses a tensor that is not on the communicator's device") {
  // No GPU is needed: a CUDA device value is enough for the communicator to expect CUDA tensors.
  auto cuda = strata::make_local_comm(torch::Device("cuda:0"));
  CHECK(cuda->device() == torch::Device("cuda:0"));
  auto t = torch::ones({2});
  auto out = torch::zeros({2});
  try {
    cuda->all_reduce(t, strata::ReduceOp::kSum);
    FAIL("all_reduce accepted a CPU tensor on a cuda:0 communicator");
  } catch (const strata::DistributedError& e) {
    const std::string what = e.what();
    CHECK(e.op() == "all_reduce");
    CHECK(what.find("cpu") != std::string::npos);
    CHECK(what.find("cuda:0") != std::string::npos);
    CHECK_FALSE(e.fix().empty());
  }
  CHECK_THROWS_AS(cuda->broadcast(t, 0), strata::DistributedError);
  CHECK_THROWS_AS(cuda->all_gather(out, t), strata::DistributedError);
  CHECK_THROWS_AS(cuda->reduce_scatter(out, t), strata::DistributedError);
  CHECK(cuda->counters(strata::CommPhase::kSetup).calls == 0);  // refused before anything is counted or sent
  // The other way round, with a tensor on a device that needs no hardware either.
  auto cpu = strata::make_local_comm();
  auto meta = torch::empty({2}, torch::Device(torch::kMeta));
  CHECK_THROWS_AS(cpu->all_reduce(meta, strata::ReduceOp::kSum), strata::DistributedError);
  torch::Tensor undefined;
  CHECK_THROWS_AS(cpu->all_reduce(undefined, strata::ReduceOp::kSum), strata::DistributedError);
  CHECK_NOTHROW(cpu->all_reduce(t, strata::ReduceOp::kSum));
  CHECK(cpu->separate_stream().get() == cpu.get());  // one stream on the CPU
}

TEST_CASE("the one-rank communicator is the identity and counts its calls") {
  auto comm = strata::make_local_comm();
  CHECK(comm->world_size() == 1);
  comm->set_phase(strata::CommPhase::kTrain);
  auto t = torch::tensor({1.0f, 2.0f});
  comm->all_reduce(t, strata::ReduceOp::kSum)->wait();
  CHECK(t[1].item<float>() == 2.0f);
  auto out = torch::zeros({2});
  comm->all_gather(out, t)->wait();
  CHECK(out[0].item<float>() == 1.0f);
  auto exchanged = torch::zeros({2});
  comm->all_to_all(exchanged, t)->wait();
  CHECK(torch::equal(exchanged, t));
  auto c = comm->counters(strata::CommPhase::kTrain);
  CHECK(c.calls == 3);
  CHECK(c.payload_bytes == 24);
  CHECK(c.bus_bytes == 0.0);
  CHECK(comm->counters(strata::CommPhase::kSetup).calls == 0);
  CHECK(strata::all_reduce_bus_factor(4) == doctest::Approx(1.5));
  CHECK(strata::gather_scatter_bus_factor(4) == doctest::Approx(0.75));
}
