// `single`: the baseline every other strategy is compared with and must reproduce. One process,
// one device, a plain optimizer step; no communication.

#include <cmath>

#include <strata/plugin.hpp>
#include <strata/strategy.hpp>

namespace {

/// `single` has no options; the struct exists so `strata describe single` and validation work
/// like for every other plugin.
struct SingleOptions {};

class SingleStrategy final : public strata::Strategy {
 public:
  void setup(const strata::StrategySetup& s) override {
    model_ = s.model;
    device_ = s.device;
    model_->to(device_);
    params_ = model_->parameters();
    optimizer_ = strata::make_optimizer(params_, s.optimizer);
  }

  torch::Tensor forward_backward(const strata::Batch& batch, strata::MicroStep micro) override {
    model_->train();
    auto inputs = batch.inputs.to(device_);
    auto targets = batch.targets.to(device_);
    auto loss = model_->loss(model_->forward(inputs), targets);
    (loss / micro.count).backward();
    return loss.detach();
  }

  double finish_gradients(double max_norm) override {
    const double norm = std::sqrt(strata::grad_square_sum(params_).item<double>());
    strata::clip_gradients(params_, norm, max_norm);
    return norm;
  }

  void step(double lr) override {
    strata::set_learning_rate(*optimizer_, lr);
    optimizer_->step();
    // Gradients are zeroed in place, not freed: the buffers stay allocated between steps, as
    // every strategy's gradient memory is counted (DESIGN §5: 4 bytes per fp32 parameter).
    optimizer_->zero_grad(/*set_to_none=*/false);
  }

  torch::Tensor evaluate(const torch::Tensor& inputs) override {
    model_->eval();
    torch::NoGradGuard no_grad;
    return model_->forward(inputs.to(device_));
  }

  const strata::Model& model() const override { return *model_; }

  double parameter_norm() override { return std::sqrt(strata::square_sum(params_).item<double>()); }

  strata::ModelStateBytes memory() const override {
    std::vector<torch::Tensor> grads;
    for (const auto& p : params_) grads.push_back(p.grad());
    return {strata::tensor_bytes(params_), strata::tensor_bytes(grads), strata::optimizer_state_bytes(*optimizer_)};
  }

 private:
  std::shared_ptr<strata::Model> model_;
  torch::Device device_{torch::kCPU};
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

void register_single(strata::Registry& registry) {
  registry.add_strategy("single", "one process, one device: the baseline (no communication)",
                        strata::Schema<SingleOptions>{},
                        [](const SingleOptions&) { return std::make_shared<SingleStrategy>(); });
}

}  // namespace

STRATA_PLUGIN(strategy, "single", "0.1.0", register_single)
