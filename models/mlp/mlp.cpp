// `mlp`: a multilayer perceptron over flattened inputs. One unit per layer, so sharding
// strategies gather and free one layer at a time. No dropout and no batch statistics: the
// model is a deterministic function of its parameters.

#include <numeric>

#include <fmt/format.h>

#include <torch/nn/functional/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <strata/errors.hpp>
#include <strata/model.hpp>
#include <strata/plugin.hpp>

namespace {

struct MlpOptions {
  std::vector<std::int64_t> hidden = {256, 256};  ///< width of each hidden layer
  std::string activation = "relu";                ///< relu, gelu or tanh
  bool layer_norm = false;                        ///< LayerNorm before each hidden activation
};

constexpr double kMaxWidth = 2147483648.0;  // 2^31: a wider layer is certainly a mistake
constexpr std::size_t kMaxLayers = 1024;

/// Features of one flattened sample: the product of the input shape.
std::int64_t input_width(const strata::DataSpec& data) {
  return std::accumulate(data.input_shape.begin(), data.input_shape.end(), std::int64_t{1}, std::multiplies<>());
}

/// Throws what make_mlp would for data it cannot take, so that estimating reports the same error.
/// Token ids are categories, not magnitudes: a linear layer over them is meaningless (and LibTorch
/// refuses the int64 x float32 product at the first step), so they need an embedding model.
void check_mlp(const strata::DataSpec& data) {
  if (data.tokens() || !c10::isFloatingType(data.input_dtype))
    // Option "name": the model chosen is what does not fit this data (the host reports model.name).
    throw strata::OptionError("name",
                              fmt::format("mlp needs floating-point inputs (images or features), but the dataset "
                                          "gives {} {}.",
                                          data.tokens() ? "token ids of type" : "inputs of type",
                                          c10::toString(data.input_dtype)),
                              "Use a model that embeds tokens, such as llama, or a dataset of float inputs "
                              "(for example fashion_mnist).");
}

torch::Tensor activate(const std::string& name, const torch::Tensor& x) {
  if (name == "gelu") return torch::gelu(x);
  if (name == "tanh") return torch::tanh(x);
  return torch::relu(x);
}

/// Linear layer, optionally LayerNorm, then the activation (none for the output layer).
class DenseUnit final : public strata::Unit {
 public:
  DenseUnit(std::int64_t in, std::int64_t out, std::string activation, bool layer_norm, bool flatten)
      : activation_(std::move(activation)), flatten_(flatten) {
    linear_ = register_module("linear", torch::nn::Linear(in, out));
    if (layer_norm) norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({out})));
  }
  torch::Tensor forward(const torch::Tensor& input, const strata::BatchContext&) override {
    auto x = flatten_ ? input.flatten(1) : input;
    x = linear_->forward(x);
    if (norm_) x = norm_->forward(x);
    return activation_.empty() ? x : activate(activation_, x);
  }

 private:
  torch::nn::Linear linear_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  std::string activation_;  // empty: no activation (logits)
  bool flatten_;
};

std::shared_ptr<strata::Model> make_mlp(const MlpOptions& o, const strata::ModelContext& context) {
  check_mlp(context.data);
  const std::int64_t inputs = input_width(context.data);
  auto model = std::make_shared<strata::Model>();
  std::int64_t width = inputs, macs = 0;
  for (std::size_t i = 0; i < o.hidden.size(); ++i) {
    model->add_unit("layer" + std::to_string(i),
                    std::make_shared<DenseUnit>(width, o.hidden[i], o.activation, o.layer_norm, i == 0));
    macs += width * o.hidden[i];
    width = o.hidden[i];
  }
  model->add_unit("head", std::make_shared<DenseUnit>(width, context.data.num_classes, "", false, o.hidden.empty()));
  macs += width * context.data.num_classes;
  model->set_flops_per_sample(6 * macs, "6 x sum of in x out over the dense layers (2 FLOPs per multiply-add forward, twice that backward; biases and activations not counted)");
  return model;
}

/// Parameters of make_mlp's model, without building it: each dense layer in x out + out (bias),
/// plus 2 out (LayerNorm weight and bias) for hidden layers with layer_norm. Doubles: widths up
/// to 2^31 over up to 1024 layers overflow no integer here.
double estimate_mlp(const MlpOptions& o, const strata::ModelContext& context) {
  check_mlp(context.data);
  double width = static_cast<double>(input_width(context.data)), params = 0;
  for (const std::int64_t h : o.hidden) {
    const double out = static_cast<double>(h);
    params += width * out + out + (o.layer_norm ? 2 * out : 0.0);
    width = out;
  }
  const double classes = static_cast<double>(context.data.num_classes);
  return params + width * classes + classes;
}

/// Memory of make_mlp's model without building it: parameters per unit (each hidden layer, the
/// head) and float32 activations per sample, the sum of every layer's outputs: the flattened
/// input, per hidden layer its linear output, LayerNorm output (with layer_norm) and activation
/// output (out each), then the logits. 4 bytes each.
strata::ModelMemoryEstimate estimate_mlp_memory(const MlpOptions& o, const strata::ModelContext& context) {
  check_mlp(context.data);
  double width = static_cast<double>(input_width(context.data)), elements = width;
  strata::ModelMemoryEstimate m;
  for (const std::int64_t h : o.hidden) {
    const double out = static_cast<double>(h);
    m.unit_parameters.push_back(width * out + out + (o.layer_norm ? 2 * out : 0.0));
    elements += out * (o.layer_norm ? 3.0 : 2.0);
    width = out;
  }
  const double classes = static_cast<double>(context.data.num_classes);
  m.unit_parameters.push_back(width * classes + classes);
  m.activation_bytes_per_sample = 4.0 * (elements + classes);
  return m;
}

void register_mlp(strata::Registry& registry) {
  strata::Schema<MlpOptions> schema;
  schema.option("hidden", &MlpOptions::hidden, "width of each hidden layer (one unit per layer)",
                strata::between(1, kMaxWidth).items_at_most(kMaxLayers))
      .option("activation", &MlpOptions::activation, "hidden activation", strata::one_of({"relu", "gelu", "tanh"}))
      .option("layer_norm", &MlpOptions::layer_norm, "LayerNorm before each hidden activation");
  registry.add_model("mlp", "multilayer perceptron over flattened inputs, one unit per layer", schema, make_mlp,
                     estimate_mlp, estimate_mlp_memory);
}

}  // namespace

STRATA_PLUGIN(model, "mlp", "0.1.0", register_mlp)
