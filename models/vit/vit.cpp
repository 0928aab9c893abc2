// `vit`: a Vision Transformer for images [C, H, W] (Dosovitskiy et al. 2021, "An Image is Worth
// 16x16 Words"), pre-norm like timm's VisionTransformer. Units: "embed" (patch embedding, class
// token, position embedding), one unit per encoder block ("block0".."block{depth-1}", so sharding
// strategies gather one block at a time) and "head" (final LayerNorm, pooling, classifier).
// No dropout and no batch statistics: the model is a deterministic function of its parameters.
// With `fused_ops`, each block's first residual add and its second LayerNorm run as one fused op
// (models/common/fused_ops.hpp).

#include <cmath>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <strata/errors.hpp>
#include <strata/model.hpp>
#include <strata/plugin.hpp>

#include "fused_ops.hpp"

namespace {

struct VitOptions {
  std::int64_t patch_size = 4;  ///< side of a square patch, in pixels
  std::int64_t dim = 192;       ///< token width
  std::int64_t depth = 6;       ///< encoder blocks (one unit each)
  std::int64_t heads = 3;       ///< attention heads (divide dim)
  double mlp_ratio = 4.0;       ///< MLP hidden width / dim
  std::string pooling = "cls";  ///< "cls": a class token feeds the head; "mean": the mean of the tokens
  bool fused_ops = false;       ///< each block's residual add and LayerNorm as one fused op (fused_ops.hpp)
};

constexpr double kInitStd = 0.02;
constexpr double kMaxWidth = 2147483648.0;  // 2^31: a wider tensor dimension is certainly a mistake
constexpr double kMaxDepth = 65536;         // encoder blocks; more is certainly a mistake

/// The shapes make_vit builds from the options and the images [C, H, W].
struct VitShape {
  std::int64_t channels = 0, patches = 0, tokens = 0;  // tokens: patches plus the class token, if any
  std::int64_t hidden = 0;                             // MLP width, round(dim x mlp_ratio)
  bool cls = true;
};

/// Validates the options against the data (what make_vit would throw) and derives the shapes,
/// so that estimating the size without building reports the same errors.
VitShape vit_shape(const VitOptions& o, const strata::DataSpec& data) {
  const auto& shape = data.input_shape;
  // Option "name": the model chosen is what does not fit this data (the host reports model.name).
  if (data.tokens() || shape.size() != 3)
    throw strata::OptionError("name",
                              fmt::format("vit needs image inputs shaped [C, H, W], but the dataset gives {} shaped [{}].",
                                          data.tokens() ? "token ids" : "inputs", fmt::join(shape, ", ")),
                              data.tokens() ? "Use a token model such as llama, or a dataset of images."
                                            : "Use a dataset of images, or the mlp model.");
  const std::int64_t h = shape[1], w = shape[2], p = o.patch_size;
  if (h % p != 0 || w % p != 0)
    throw strata::OptionError("patch_size", fmt::format("patch_size {} does not divide the {}x{} images.", p, h, w),
                              "Choose a patch_size that divides both the height and the width.");
  if (o.dim % o.heads != 0)
    throw strata::OptionError("heads", fmt::format("heads {} does not divide dim {}.", o.heads, o.dim),
                              "Choose heads and dim so that dim is a multiple of heads.");
  // Rounded in double first: an absurd ratio must give an error, not an overflowing llround.
  const double hidden = std::round(static_cast<double>(o.dim) * o.mlp_ratio);
  if (!(hidden >= 1 && hidden <= kMaxWidth))  // NaN included
    throw strata::OptionError("mlp_ratio", fmt::format("mlp_ratio {} gives an MLP of width {}.", o.mlp_ratio, hidden),
                              "Use an mlp_ratio giving a width between 1 and 2^31 (4.0 is usual).");
  VitShape s;
  s.channels = shape[0];
  s.patches = (h / p) * (w / p);
  s.cls = o.pooling == "cls";
  s.tokens = s.patches + (s.cls ? 1 : 0);
  s.hidden = static_cast<std::int64_t>(hidden);
  return s;
}

/// Normal(0, std) truncated at +-2 std, by inverse CDF as torch.nn.init.trunc_normal_ (which
/// LibTorch lacks). Deterministic under torch::manual_seed.
void trunc_normal_(torch::Tensor t, double std) {
  torch::NoGradGuard no_grad;
  const double lo = 0.5 * (1.0 + std::erf(-2.0 / std::sqrt(2.0)));  // CDF(-2)
  t.uniform_(2 * lo - 1, 1 - 2 * lo).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-2 * std, 2 * std);
}

/// timm's initialization: linears trunc-normal(0.02) with zero biases; LayerNorm 1 and 0 (LibTorch's default).
torch::nn::Linear make_linear(std::int64_t in, std::int64_t out) {
  torch::nn::Linear linear(in, out);
  trunc_normal_(linear->weight, kInitStd);
  torch::nn::init::zeros_(linear->bias);
  return linear;
}

torch::nn::LayerNorm make_norm(std::int64_t dim) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}));
}

/// Patches -> tokens [n, T, dim]: a Conv2d with kernel = stride = patch (a linear map of each
/// patch), then the class token (pooling "cls") in front, plus the learned position embedding.
class EmbedUnit final : public strata::Unit {
 public:
  EmbedUnit(std::int64_t channels, std::int64_t patch, std::int64_t dim, std::int64_t tokens, bool cls) {
    // The patch projection keeps PyTorch's default Conv2d initialization, as timm does.
    proj_ = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, dim, patch).stride(patch)));
    if (cls) cls_ = register_parameter("cls_token", torch::zeros({1, 1, dim}));
    pos_ = register_parameter("pos_embed", torch::empty({1, tokens, dim}));
    trunc_normal_(pos_, kInitStd);
  }
  torch::Tensor forward(const torch::Tensor& images, const strata::BatchContext&) override {
    auto x = proj_->forward(images).flatten(2).transpose(1, 2);  // [n, patches, dim]
    if (cls_.defined()) x = torch::cat({cls_.expand({x.size(0), 1, x.size(2)}), x}, 1);
    return x + pos_;
  }

 private:
  torch::nn::Conv2d proj_{nullptr};
  torch::Tensor cls_, pos_;
};

/// x + attn(norm1(x)), then x + mlp(norm2(x)): a pre-norm encoder block. `fused`: the first
/// residual add and norm2 as one op (fused::add_layer_norm: one pass where the add and the
/// LayerNorm take two, a CUDA kernel on a GPU).
class BlockUnit final : public strata::Unit {
 public:
  BlockUnit(std::int64_t dim, std::int64_t heads, std::int64_t hidden, bool fused) : heads_(heads), fused_(fused) {
    norm1_ = register_module("norm1", make_norm(dim));
    qkv_ = register_module("qkv", make_linear(dim, 3 * dim));
    out_ = register_module("proj", make_linear(dim, dim));
    norm2_ = register_module("norm2", make_norm(dim));
    fc1_ = register_module("fc1", make_linear(dim, hidden));
    fc2_ = register_module("fc2", make_linear(hidden, dim));
  }
  torch::Tensor forward(const torch::Tensor& x, const strata::BatchContext&) override {
    const auto n = x.size(0), t = x.size(1), dim = x.size(2);
    // [n, T, 3, heads, head_dim] -> 3 x [n, heads, T, head_dim]
    const auto qkv = qkv_->forward(norm1_->forward(x)).view({n, t, 3, heads_, dim / heads_}).permute({2, 0, 3, 1, 4});
    const auto attended = torch::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2]);
    const auto attention = out_->forward(attended.transpose(1, 2).reshape({n, t, dim}));
    torch::Tensor y, m;
    if (fused_) {
      std::tie(y, m) = strata::fused::add_layer_norm(x, attention, norm2_->weight, norm2_->bias, norm2_->options.eps());
    } else {
      y = x + attention;
      m = norm2_->forward(y);
    }
    return y + fc2_->forward(torch::gelu(fc1_->forward(m)));
  }

 private:
  std::int64_t heads_;
  bool fused_;
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, out_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};

/// Final LayerNorm, pooling (class token or mean of the tokens), classifier.
class HeadUnit final : public strata::Unit {
 public:
  HeadUnit(std::int64_t dim, std::int64_t classes, bool cls) : cls_(cls) {
    norm_ = register_module("norm", make_norm(dim));
    linear_ = register_module("linear", make_linear(dim, classes));
  }
  torch::Tensor forward(const torch::Tensor& x, const strata::BatchContext&) override {
    const auto y = norm_->forward(x);
    return linear_->forward(cls_ ? y.select(1, 0) : y.mean(1));
  }

 private:
  bool cls_;
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear linear_{nullptr};
};

std::shared_ptr<strata::Model> make_vit(const VitOptions& o, const strata::ModelContext& context) {
  const VitShape s = vit_shape(o, context.data);
  const std::int64_t channels = s.channels, p = o.patch_size, hidden = s.hidden, patches = s.patches,
                     tokens = s.tokens, classes = context.data.num_classes;
  const bool cls = s.cls;

  auto model = std::make_shared<strata::Model>();
  model->add_unit("embed", std::make_shared<EmbedUnit>(channels, p, o.dim, tokens, cls));
  for (std::int64_t i = 0; i < o.depth; ++i)
    model->add_unit("block" + std::to_string(i), std::make_shared<BlockUnit>(o.dim, o.heads, hidden, o.fused_ops));
  model->add_unit("head", std::make_shared<HeadUnit>(o.dim, classes, cls));

  // Multiply-adds of every matmul of one forward pass (2 FLOPs each; backward is twice forward):
  // the patch projection, per block qkv, the scores Q K^T and the weighted sum A V over all tokens
  // (class token included; heads x head_dim = dim), the output projection and the two MLP
  // layers, then the classifier. Norms, softmax, GELU, biases and additions are not counted.
  const std::int64_t block_macs = tokens * o.dim * 3 * o.dim    // qkv
                                  + 2 * tokens * tokens * o.dim  // Q K^T and A V
                                  + tokens * o.dim * o.dim       // output projection
                                  + 2 * tokens * o.dim * hidden; // fc1, fc2
  const std::int64_t macs = patches * channels * p * p * o.dim + o.depth * block_macs + o.dim * classes;
  model->set_flops_per_sample(3 * 2 * macs, "6 x (patch projection + depth x (4 T d^2 + 2 T^2 d + 2 T d h) + d classes) multiply-adds, T tokens, d dim, h MLP width (2 FLOPs per multiply-add forward, twice that backward)");
  return model;
}

/// Parameters of make_vit's model, without building it (d dim, h MLP width, T tokens, C channels,
/// p patch_size, K classes): embed C p^2 d + d (patch projection and bias) + d (class token, with
/// cls pooling) + T d (position embedding); per block 4 d^2 + 2 d h + 9 d + h (qkv 3 d^2 + 3 d,
/// proj d^2 + d, fc1 d h + h, fc2 h d + d, two LayerNorms 2 d each); head 2 d + d K + K. In doubles.
double estimate_vit(const VitOptions& o, const strata::ModelContext& context) {
  const VitShape s = vit_shape(o, context.data);
  const double d = static_cast<double>(o.dim), h = static_cast<double>(s.hidden), p = static_cast<double>(o.patch_size);
  const double classes = static_cast<double>(context.data.num_classes);
  const double embed = static_cast<double>(s.channels) * p * p * d + d + (s.cls ? d : 0.0)
                       + static_cast<double>(s.tokens) * d;
  const double block = 4 * d * d + 2 * d * h + 9 * d + h;
  const double head = 2 * d + d * classes + classes;
  return embed + static_cast<double>(o.depth) * block + head;
}

/// Memory of make_vit's model without building it: parameters per unit (as estimate_vit) and
/// float32 activations per sample, the sum of every layer's outputs (T tokens, d dim, h MLP width):
/// embed 2 T d (projection, position sum); per block T (9 d + 2 h) + heads T^2 (norm1, qkv 3 T d,
/// the attention scores where materialized, attended, proj, residual, norm2, fc1 and GELU T h each,
/// fc2, residual); head d + K. 4 bytes each.
strata::ModelMemoryEstimate estimate_vit_memory(const VitOptions& o, const strata::ModelContext& context) {
  const VitShape s = vit_shape(o, context.data);
  const double d = static_cast<double>(o.dim), h = static_cast<double>(s.hidden), p = static_cast<double>(o.patch_size);
  const double t = static_cast<double>(s.tokens), classes = static_cast<double>(context.data.num_classes);
  strata::ModelMemoryEstimate m;
  m.unit_parameters.push_back(static_cast<double>(s.channels) * p * p * d + d + (s.cls ? d : 0.0) + t * d);
  for (std::int64_t i = 0; i < o.depth; ++i) m.unit_parameters.push_back(4 * d * d + 2 * d * h + 9 * d + h);
  m.unit_parameters.push_back(2 * d + d * classes + classes);
  const double block = t * (9 * d + 2 * h) + static_cast<double>(o.heads) * t * t;
  m.activation_bytes_per_sample = 4.0 * (2 * t * d + static_cast<double>(o.depth) * block + d + classes);
  return m;
}

void register_vit(strata::Registry& registry) {
  strata::Schema<VitOptions> schema;
  schema
      .option("patch_size", &VitOptions::patch_size, "side of a square patch in pixels (divides H and W)",
              strata::between(1, kMaxWidth))
      .option("dim", &VitOptions::dim, "token width", strata::between(1, kMaxWidth))
      .option("depth", &VitOptions::depth, "encoder blocks (one unit each)", strata::between(0, kMaxDepth))
      .option("heads", &VitOptions::heads, "attention heads (divide dim)", strata::between(1, kMaxWidth))
      .option("mlp_ratio", &VitOptions::mlp_ratio, "MLP hidden width as a multiple of dim", strata::positive())
      .option("pooling", &VitOptions::pooling, "what feeds the head: a class token, or the mean of the tokens",
              strata::one_of({"cls", "mean"}))
      .option("fused_ops", &VitOptions::fused_ops,
              "each block's residual add and second LayerNorm as one fused op (one CUDA kernel forward and one "
              "backward on a GPU; the same values by ATen ops on the CPU); false: the unfused ops");
  registry.add_model("vit", "Vision Transformer (patch embedding, pre-norm encoder blocks, head), one unit per block",
                     schema, make_vit, estimate_vit, estimate_vit_memory);
}

}  // namespace

STRATA_PLUGIN(model, "vit", "0.1.0", register_vit)
