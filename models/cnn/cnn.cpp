// `cnn`: a small ConvNet for images [C, H, W]. Each block is conv 3x3 -> GroupNorm -> ReLU ->
// max-pool 2x2 and is one unit; then a hidden fully connected unit and the classifier head.
// GroupNorm instead of BatchNorm: no batch statistics, so data-parallel strategies reproduce
// single-process training exactly.

#include <fmt/format.h>
#include <fmt/ranges.h>
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

constexpr double kMaxWidth = 2147483648.0;  // 2^31: more channels or features are certainly a mistake
constexpr std::size_t kMaxBlocks = 64;      // each block halves the image: 64 exceed any real image

/// Throws what make_cnn would for options that do not fit the data, so that estimating the
/// size (without building) reports the same errors.
void check_cnn(const CnnOptions& o, const strata::DataSpec& data) {
  // Option "name": the model chosen is what does not fit this data (the host reports model.name).
  if (data.tokens() || data.input_shape.size() != 3)
    throw strata::OptionError("name",
                              fmt::format("cnn needs image inputs shaped [C, H, W], but the dataset gives {} shaped [{}].",
                                          data.tokens() ? "token ids" : "inputs", fmt::join(data.input_shape, ", ")),
                              data.tokens() ? "Use a token model such as llama, or a dataset of images."
                                            : "Use a dataset of images, or the mlp model.");
  std::int64_t h = data.input_shape[1], w = data.input_shape[2];
  for (std::size_t i = 0; i < o.channels.size(); ++i) {
    if (o.groups > 0 && o.channels[i] % o.groups != 0)
      throw strata::OptionError("groups",
                                fmt::format("groups {} does not divide channels[{}] = {}.", o.groups, i, o.channels[i]),
                                "Choose groups that divides every entry of channels.");
    if (h < 2 || w < 2)
      throw strata::OptionError("channels", fmt::format("{} blocks halve a {}x{} image below 1x1.", o.channels.size(),
                                                        data.input_shape[1], data.input_shape[2]),
                                "Use fewer conv blocks.");
    h /= 2;
    w /= 2;
  }
}

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
  check_cnn(o, context.data);
  std::int64_t channels = context.data.input_shape[0], h = context.data.input_shape[1], w = context.data.input_shape[2];
  auto model = std::make_shared<strata::Model>();
  std::int64_t macs = 0;
  for (std::size_t i = 0; i < o.channels.size(); ++i) {
    const std::int64_t out = o.channels[i];
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

/// Parameters of make_cnn's model, without building it: per block 9 C_in C_out + C_out (3x3 conv
/// and bias) + 2 C_out (GroupNorm weight and bias, when groups > 0); then in x out + out for the
/// fully connected layer (when hidden > 0) and the head, in = C H W after the pools. In doubles.
double estimate_cnn(const CnnOptions& o, const strata::ModelContext& context) {
  check_cnn(o, context.data);
  const auto& shape = context.data.input_shape;
  double channels = static_cast<double>(shape[0]), params = 0;
  std::int64_t h = shape[1], w = shape[2];
  for (const std::int64_t c : o.channels) {
    const double out = static_cast<double>(c);
    params += 9 * channels * out + out + (o.groups > 0 ? 2 * out : 0.0);
    channels = out;
    h /= 2;
    w /= 2;
  }
  double width = channels * static_cast<double>(h) * static_cast<double>(w);
  if (o.hidden > 0) {
    params += width * static_cast<double>(o.hidden) + static_cast<double>(o.hidden);
    width = static_cast<double>(o.hidden);
  }
  const double classes = static_cast<double>(context.data.num_classes);
  return params + width * classes + classes;
}

/// Memory of make_cnn's model without building it: parameters per unit (as estimate_cnn) and
/// float32 activations per sample, the sum of every layer's outputs: the input, per block the
/// convolution's, GroupNorm's (groups > 0) and ReLU's C_out H W and the pool's C_out H/2 W/2;
/// then the fully connected layer's output and ReLU (hidden each) and the logits. 4 bytes each.
strata::ModelMemoryEstimate estimate_cnn_memory(const CnnOptions& o, const strata::ModelContext& context) {
  check_cnn(o, context.data);
  const auto& shape = context.data.input_shape;
  double channels = static_cast<double>(shape[0]);
  std::int64_t h = shape[1], w = shape[2];
  double elements = channels * static_cast<double>(h) * static_cast<double>(w);
  strata::ModelMemoryEstimate m;
  for (const std::int64_t c : o.channels) {
    const double out = static_cast<double>(c);
    m.unit_parameters.push_back(9 * channels * out + out + (o.groups > 0 ? 2 * out : 0.0));
    const double plane = out * static_cast<double>(h) * static_cast<double>(w);
    h /= 2;
    w /= 2;
    elements += plane * (o.groups > 0 ? 3.0 : 2.0) + out * static_cast<double>(h) * static_cast<double>(w);
    channels = out;
  }
  double width = channels * static_cast<double>(h) * static_cast<double>(w);
  if (o.hidden > 0) {
    m.unit_parameters.push_back(width * static_cast<double>(o.hidden) + static_cast<double>(o.hidden));
    elements += 2.0 * static_cast<double>(o.hidden);
    width = static_cast<double>(o.hidden);
  }
  const double classes = static_cast<double>(context.data.num_classes);
  m.unit_parameters.push_back(width * classes + classes);
  m.activation_bytes_per_sample = 4.0 * (elements + classes);
  return m;
}

void register_cnn(strata::Registry& registry) {
  strata::Schema<CnnOptions> schema;
  schema
      .option("channels", &CnnOptions::channels, "output channels of each conv block (one unit each)",
              strata::between(1, kMaxWidth).items_at_most(kMaxBlocks))
      .option("hidden", &CnnOptions::hidden, "width of the fully connected unit; 0 omits it",
              strata::between(0, kMaxWidth))
      .option("groups", &CnnOptions::groups, "GroupNorm groups per block; 0 disables normalization",
              strata::between(0, kMaxWidth));
  registry.add_model("cnn", "small ConvNet (conv-GroupNorm-ReLU-pool blocks, FC, head), one unit per block", schema,
                     make_cnn, estimate_cnn, estimate_cnn_memory);
}

}  // namespace

STRATA_PLUGIN(model, "cnn", "0.1.0", register_cnn)
