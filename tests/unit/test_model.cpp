// Model units, optimizer helpers, learning-rate schedules and the one-rank communicator.
#include "test_support.hpp"

#include <cmath>

#include <torch/nn/modules/linear.h>

#include "strata/comm.hpp"
#include "strata/model.hpp"
#include "strata/optim.hpp"
#include "train/schedule.hpp"

namespace {
class Scale final : public strata::Unit {
 public:
  explicit Scale(double f) : f_(f) { w_ = register_parameter("w", torch::ones({2})); }
  torch::Tensor forward(const torch::Tensor& x) override { return x * w_ * f_; }

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

TEST_CASE("default loss is cross-entropy and the metric is top-1 accuracy") {
  strata::Model m;
  auto logits = torch::tensor({{2.0, 0.0}, {0.0, 3.0}, {1.0, 0.0}});
  auto target = torch::tensor({0, 1, 1}, torch::kInt64);
  auto counts = m.metric(logits, target);
  CHECK(counts.correct == 2);
  CHECK(counts.total == 3);
  const double expected =
      (std::log(1 + std::exp(-2.0)) + std::log(1 + std::exp(-3.0)) + std::log(1 + std::exp(1.0))) / 3;
  CHECK(m.loss(logits, target).item<double>() == doctest::Approx(expected));
}

TEST_CASE("optimizer state bytes are measured from the tensors the optimizer holds") {
  torch::nn::Linear layer(10, 5);  // 55 parameters in two tensors
  auto params = layer->parameters();
  strata::OptimizerSpec adamw;
  auto opt = strata::make_optimizer(params, adamw);
  CHECK(strata::optimizer_state_bytes(*opt) == 0);  // lazily allocated
  layer->forward(torch::ones({3, 10})).sum().backward();
  opt->step();
  CHECK(strata::optimizer_state_bytes(*opt) == 2 * 55 * 4 + 2 * 8);
  strata::OptimizerSpec sgd;
  sgd.name = "sgd";
  auto opt2 = strata::make_optimizer(params, sgd);
  opt2->step();
  CHECK(strata::optimizer_state_bytes(*opt2) == 55 * 4);
  strata::set_learning_rate(*opt2, 0.5);
  CHECK(opt2->param_groups()[0].options().get_lr() == 0.5);
  CHECK(strata::tensor_bytes(params) == 55 * 4);
}

TEST_CASE("gradient norm and clipping follow torch.nn.utils.clip_grad_norm_") {
  auto p = torch::zeros({2}).requires_grad_();
  p.mutable_grad() = torch::tensor({3.0f, 4.0f});
  std::vector<torch::Tensor> params{p};
  const double norm = std::sqrt(strata::grad_square_sum(params).item<double>());
  CHECK(norm == doctest::Approx(5.0));
  strata::clip_gradients(params, norm, 10.0);  // below the limit: untouched
  CHECK(p.grad()[0].item<float>() == 3.0f);
  strata::clip_gradients(params, norm, 1.0);
  CHECK(std::sqrt(strata::grad_square_sum(params).item<double>()) == doctest::Approx(1.0).epsilon(1e-5));
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
  auto c = comm->counters(strata::CommPhase::kTrain);
  CHECK(c.calls == 2);
  CHECK(c.payload_bytes == 16);
  CHECK(c.bus_bytes == 0.0);
  CHECK(comm->counters(strata::CommPhase::kSetup).calls == 0);
  CHECK(strata::all_reduce_bus_factor(4) == doctest::Approx(1.5));
  CHECK(strata::gather_scatter_bus_factor(4) == doctest::Approx(0.75));
}
