// `cnn`: a small ConvNet for images [C, H, W]. Each block is conv 3x3 -> GroupNorm -> ReLU ->
// max-pool 2x2 and is one unit; then a hidden fully connected unit and the classifier head.
// GroupNorm instead of BatchNorm: no batch statistics, so data-parallel strategies reproduce
// single-process training exactly.

#include <fmt/format.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <strata/errors.hpp>
#include <strata/model.hpp>
#include <strata/plugin.hpp>

namespace {

struct CnnOptions {
  std::vector<std::int64_t> channels = {32, 64};  ///< output channels of each conv block
  std::int64_t hidden = 128;                      ///< width of the fully connected layer; 0 omits it
  std::int64_t groups = 8;                        ///< GroupNorm groups per block; 0 disables normalization
};

class ConvBlock final : public strata::Unit {
 public:
  ConvBlock(std::int64_t in, std::int64_t out, std::int64_t groups) {
    conv_ = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1)));
    if (groups > 0) norm_ = register_module("norm", torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, out)));
  }
  torch::Tensor forward(const torch::Tensor& x, const strata::BatchContext&) override {
    auto y = conv_->forward(x);
    if (norm_) y = norm_->forward(y);
    return torch::max_pool2d(torch::relu(y), 2);
  }

 private:
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::GroupNorm norm_{nullptr};
};

class DenseUnit final : public strata::Unit {
 public:
  DenseUnit(std::int64_t in, std::int64_t out, bool relu) : relu_(relu) {
    linear_ = register_module("linear", torch::nn::Linear(in, out));
  }
  torch::Tensor forward(const torch::Tensor& x, const strata::BatchContext&) override {
    auto y = linear_->forward(x.flatten(1));
    return relu_ ? torch::relu(y) : y;
  }

 private:
  torch::nn::Linear linear_{nullptr};
  bool relu_;
};

std::shared_ptr<strata::Model> make_cnn(const CnnOptions& o, const strata::ModelContext& context) {
  if (context.data.input_shape.size() != 3)
    throw strata::Error(fmt::format("cnn needs image inputs shaped [C, H, W], but the dataset gives {} dimension(s).",
                                    context.data.input_shape.size()),
                        "Use a dataset of images, or the mlp model.");
  std::int64_t channels = context.data.input_shape[0], h = context.data.input_shape[1], w = context.data.input_shape[2];
  auto model = std::make_shared<strata::Model>();
  std::int64_t macs = 0;
  for (std::size_t i = 0; i < o.channels.size(); ++i) {
    const std::int64_t out = o.channels[i];
    if (o.groups > 0 && out % o.groups != 0)
      throw strata::OptionError("groups", fmt::format("groups {} does not divide channels[{}] = {}.", o.groups, i, out),
                                "Choose groups that divides every entry of channels.");
    if (h < 2 || w < 2)
      throw strata::OptionError("channels", fmt::format("{} blocks halve a {}x{} image below 1x1.", o.channels.size(),
                                                        context.data.input_shape[1], context.data.input_shape[2]),
                                "Use fewer conv blocks.");
    model->add_unit("block" + std::to_string(i), std::make_shared<ConvBlock>(channels, out, o.groups));
    macs += 9 * channels * out * h * w;
    channels = out;
    h /= 2;
    w /= 2;
  }
  std::int64_t width = channels * h * w;
  if (o.hidden > 0) {
    model->add_unit("fc", std::make_shared<DenseUnit>(width, o.hidden, true));
    macs += width * o.hidden;
    width = o.hidden;
  }
  model->add_unit("head", std::make_shared<DenseUnit>(width, context.data.num_classes, false));
  macs += width * context.data.num_classes;
  model->set_flops_per_sample(6 * macs, "6 x (sum of 9 C_in C_out H W over the 3x3 convolutions + in x out over the dense layers) (2 FLOPs per multiply-add forward, twice that backward)");
  return model;
}

void register_cnn(strata::Registry& registry) {
  strata::Schema<CnnOptions> schema;
  schema.option("channels", &CnnOptions::channels, "output channels of each conv block (one unit each)", strata::at_least(1))
      .option("hidden", &CnnOptions::hidden, "width of the fully connected unit; 0 omits it", strata::at_least(0))
      .option("groups", &CnnOptions::groups, "GroupNorm groups per block; 0 disables normalization", strata::at_least(0));
  registry.add_model("cnn", "small ConvNet (conv-GroupNorm-ReLU-pool blocks, FC, head), one unit per block", schema,
                     make_cnn);
}

}  // namespace

STRATA_PLUGIN(model, "cnn", "0.1.0", register_cnn)
