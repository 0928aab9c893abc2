// `llama`: a Llama-family decoder (Touvron et al. 2023; Llama 3: Grattafiori et al. 2024) whose
// math follows Hugging Face transformers' modeling_llama.py op by op (RMSNorm in float32, rotate-half
// RoPE, grouped-query attention, SwiGLU), so a checkpoint loaded under the names of
// external_names() gives transformers' logits. Units: "embed", "block0".."block{L-1}" (one
// decoder layer each, so sharding strategies gather one layer at a time) and "head". RoPE
// tables are computed from BatchContext::positions, once per batch for all blocks (and their
// recomputation under activation checkpointing), not stored: the state dict holds parameters only.
// No dropout. With `fused_ops`, RMSNorm (with the residual add before it), RoPE and SwiGLU are the
// fused ops of models/common (same math, less kept for backward, CUDA kernels on a GPU).

#include <cmath>
#include <tuple>

#include <fmt/format.h>
#include <torch/autograd.h>
#include <torch/nn/functional/linear.h>

#include <strata/errors.hpp>
#include <strata/model.hpp>
#include <strata/plugin.hpp>

#include "fused_ops.hpp"
#include "llama_config.hpp"

namespace strata::llama {
namespace {

constexpr double kInitStd = 0.02;  // transformers' initializer_range: N(0, 0.02) weights, zero biases

/// y = x W^T (+ b): a Linear whose weight may be another unit's parameter (tied embeddings).
class Dense final : public torch::nn::Module {
 public:
  Dense(std::int64_t in, std::int64_t out, bool bias) {
    weight = register_parameter("weight", torch::empty({out, in}).normal_(0, kInitStd));
    if (bias) this->bias = register_parameter("bias", torch::zeros({out}));
  }
  /// Registers `shared` (already a parameter of another unit) as this layer's weight.
  explicit Dense(const torch::Tensor& shared) { weight = register_parameter("weight", shared); }
  torch::Tensor forward(const torch::Tensor& x) const { return torch::nn::functional::linear(x, weight, bias); }

  torch::Tensor weight, bias;
};

/// transformers' LlamaRMSNorm: normalized in float32, cast back to the input dtype, then scaled.
/// `fused`: as one op (fused::rms_norm), with the residual add before it when given one.
class RmsNorm final : public torch::nn::Module {
 public:
  RmsNorm(std::int64_t dim, double eps, bool fused) : eps_(eps), fused_(fused) {
    weight = register_parameter("weight", torch::ones({dim}));
  }
  torch::Tensor forward(const torch::Tensor& x) const {
    if (fused_) return fused::rms_norm(x, weight, eps_);
    const auto h = x.to(torch::kFloat32);
    return weight * (h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_)).to(x.scalar_type());
  }
  /// {x + residual, forward(x + residual)}.
  std::pair<torch::Tensor, torch::Tensor> add_forward(const torch::Tensor& x, const torch::Tensor& residual) const {
    if (fused_) return fused::add_rms_norm(x, residual, weight, eps_);
    auto y = x + residual;
    return {y, forward(y)};
  }

  torch::Tensor weight;

 private:
  double eps_;
  bool fused_;
};

/// RoPE inverse frequencies [head_dim / 2], float32, as transformers' default and llama3 rope
/// init functions compute them (same ops in the same order, so the same roundings).
torch::Tensor inverse_frequencies(const LlamaConfig& c, torch::Device device) {
  const auto int64 = torch::TensorOptions(torch::kInt64).device(device);
  const auto exponents = torch::arange(0, c.head_dim, 2, int64).to(torch::kFloat32) / c.head_dim;
  const auto inv = torch::pow(c.rope_theta, exponents).reciprocal();
  if (!c.rope_scaling.llama3) return inv;
  // Llama 3: long wavelengths slowed down by `factor`, short ones kept, a smooth blend between.
  const auto& s = c.rope_scaling;
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
  const auto wavelen = inv.reciprocal() * (2 * M_PI);
  const auto scaled = torch::where(wavelen > low_wavelen, inv / s.factor, inv);
  const auto smooth = (wavelen.reciprocal() * old_len - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const auto medium = (wavelen < high_wavelen).logical_not() & (wavelen > low_wavelen).logical_not();
  return torch::where(medium, smoothed, scaled);
}

/// cos and sin [n or 1, 1, T, head_dim] in the dtype of `like`, computed in float32 from the
/// token positions (BatchContext::positions, else 0..T-1); frequencies repeat as cat(f, f).
std::pair<torch::Tensor, torch::Tensor> rotary(const LlamaConfig& c, const BatchContext& context,
                                               const torch::Tensor& like) {
  const auto int64 = torch::TensorOptions(torch::kInt64).device(like.device());
  const auto positions = context.positions.defined() ? context.positions : torch::arange(like.size(1), int64).unsqueeze(0);
  const auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inverse_frequencies(c, like.device());
  const auto angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);
  return {angles.cos().to(like.scalar_type()), angles.sin().to(like.scalar_type())};
}

/// cat(-x2, x1) over the halves of the last dimension.
torch::Tensor rotate_half(const torch::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

/// [n, kv_heads, T, d] -> [n, kv_heads * group, T, d], each key/value head serving `group` query heads.
torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t group) {
  if (group == 1) return x;
  const auto n = x.size(0), kv = x.size(1), t = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({n, kv, group, t, d}).reshape({n, kv * group, t, d});
}

/// Causal and padding masks as one boolean [n, 1, T, T] (true: may attend). A query always sees
/// itself, so padding rows (whose outputs nothing reads) never softmax over nothing into NaN.
torch::Tensor attention_mask(const torch::Tensor& mask) {
  const auto t = mask.size(1);
  const auto options = mask.options().dtype(torch::kBool);
  const auto causal = torch::ones({t, t}, options).tril();
  return (causal & (mask.to(torch::kBool).unsqueeze(1) | torch::eye(t, options))).unsqueeze(1);
}

/// The RoPE tables and the attention mask of the batch going through, shared by every block of
/// one model: the first block to need them computes them, the others (and a checkpointed block's
/// recomputation in backward) reuse them while the batch's positions and mask are the same tensors,
/// unmodified (each held, so another batch's cannot take its place in memory). Without positions
/// (unpadded batches) the tables depend on the length, device and dtype only and last across steps.
/// One model runs one batch at a time (dp's replicas are models of their own).
class BatchTables {
 public:
  explicit BatchTables(LlamaConfig config) : config_(std::move(config)) {}

  std::pair<torch::Tensor, torch::Tensor> rotary(const BatchContext& context, const torch::Tensor& like) {
    const bool same = cos_.defined() && cos_.scalar_type() == like.scalar_type() && cos_.device() == like.device() &&
                      cos_.size(2) == like.size(1) && same_tensor(positions_, positions_version_, context.positions);
    if (!same) {
      std::tie(cos_, sin_) = strata::llama::rotary(config_, context, like);
      positions_ = context.positions;
      positions_version_ = version(positions_);
    }
    return {cos_, sin_};
  }

  torch::Tensor mask(const torch::Tensor& mask) {
    if (!mask_.defined() || !same_tensor(mask_key_, mask_version_, mask)) {
      mask_ = attention_mask(mask);
      mask_key_ = mask;
      mask_version_ = version(mask);
    }
    return mask_;
  }

 private:
  static std::int64_t version(const torch::Tensor& t) { return t.defined() ? static_cast<std::int64_t>(t._version()) : -1; }
  /// `t` is `held` (both undefined, or one tensor not modified in place since).
  static bool same_tensor(const torch::Tensor& held, std::int64_t held_version, const torch::Tensor& t) {
    if (!held.defined() || !t.defined()) return held.defined() == t.defined();
    return held.is_same(t) && version(t) == held_version;
  }

  LlamaConfig config_;
  torch::Tensor positions_, cos_, sin_;
  std::int64_t positions_version_ = -1;
  torch::Tensor mask_key_, mask_;
  std::int64_t mask_version_ = -1;
};

/// Token ids [n, T] -> embeddings [n, T, hidden]; the parameter is `embed.weight`.
class EmbedUnit final : public Unit {
 public:
  EmbedUnit(std::int64_t vocab, std::int64_t hidden) {
    weight = register_parameter("weight", torch::empty({vocab, hidden}).normal_(0, kInitStd));
  }
  torch::Tensor forward(const torch::Tensor& ids, const BatchContext&) override {
    return torch::embedding(weight, ids);
  }

  torch::Tensor weight;
};

/// transformers' LlamaDecoderLayer: x + attn(attn_norm(x)), then + mlp(mlp_norm(.)).
class BlockUnit final : public Unit {
 public:
  BlockUnit(const LlamaConfig& c, std::shared_ptr<BatchTables> tables) : config_(c), tables_(std::move(tables)) {
    const auto hidden = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    attn_norm_ = register_module("attn_norm", std::make_shared<RmsNorm>(hidden, c.rms_norm_eps, c.fused_ops));
    q_proj_ = register_module("q_proj", std::make_shared<Dense>(hidden, q, c.qkv_bias()));
    k_proj_ = register_module("k_proj", std::make_shared<Dense>(hidden, kv, c.qkv_bias()));
    v_proj_ = register_module("v_proj", std::make_shared<Dense>(hidden, kv, c.qkv_bias()));
    o_proj_ = register_module("o_proj", std::make_shared<Dense>(q, hidden, c.o_bias()));
    if (c.qk_norm()) {  // Qwen3: RMSNorm over each head of q and k (unfused: 4-D, head_dim wide)
      q_norm_ = register_module("q_norm", std::make_shared<RmsNorm>(c.head_dim, c.rms_norm_eps, false));
      k_norm_ = register_module("k_norm", std::make_shared<RmsNorm>(c.head_dim, c.rms_norm_eps, false));
    }
    mlp_norm_ = register_module("mlp_norm", std::make_shared<RmsNorm>(hidden, c.rms_norm_eps, c.fused_ops));
    gate_proj_ = register_module("gate_proj", std::make_shared<Dense>(hidden, c.intermediate_size, false));
    up_proj_ = register_module("up_proj", std::make_shared<Dense>(hidden, c.intermediate_size, false));
    down_proj_ = register_module("down_proj", std::make_shared<Dense>(c.intermediate_size, hidden, false));
  }

  torch::Tensor forward(const torch::Tensor& x, const BatchContext& context) override {
    const auto n = x.size(0), t = x.size(1), d = config_.head_dim;
    const bool fused = config_.fused_ops;
    const auto h = attn_norm_->forward(x);
    auto q = q_proj_->forward(h), k = k_proj_->forward(h);  // [n, T, heads * d], [n, T, kv_heads * d]
    if (q_norm_) {
      q = q_norm_->forward(q.view({n, t, -1, d})).view({n, t, -1});
      k = k_norm_->forward(k.view({n, t, -1, d})).view({n, t, -1});
    }
    const auto v = v_proj_->forward(h).view({n, t, -1, d}).transpose(1, 2);
    const auto [cos, sin] = tables_->rotary(context, x);
    if (fused) std::tie(q, k) = fused::rope_(q, k, cos, sin, d);
    q = q.view({n, t, -1, d}).transpose(1, 2);  // [n, heads, T, d]
    k = k.view({n, t, -1, d}).transpose(1, 2);  // [n, kv_heads, T, d]
    if (!fused) {
      q = q * cos + rotate_half(q) * sin;
      k = k * cos + rotate_half(k) * sin;
    }
    const double scale = std::pow(static_cast<double>(d), -0.5);
    torch::Tensor attended;
    if (context.mask.defined()) {
      // As transformers' sdpa path: with a mask, SDPA's fused kernels take no GQA, so repeat K, V.
      const auto group = config_.num_heads / config_.num_kv_heads;
      attended = torch::scaled_dot_product_attention(q, repeat_kv(k, group), repeat_kv(v, group),
                                                     tables_->mask(context.mask), 0.0, false, scale);
    } else {
      attended = torch::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, scale,
                                                     /*enable_gqa=*/config_.num_kv_heads != config_.num_heads);
    }
    const auto [y, m] = mlp_norm_->add_forward(x, o_proj_->forward(attended.transpose(1, 2).reshape({n, t, -1})));
    const auto gate = gate_proj_->forward(m), up = up_proj_->forward(m);
    return y + down_proj_->forward(fused ? fused::swiglu(gate, up) : torch::silu(gate) * up);
  }

 private:
  LlamaConfig config_;
  std::shared_ptr<BatchTables> tables_;
  std::shared_ptr<RmsNorm> attn_norm_, mlp_norm_, q_norm_, k_norm_;
  std::shared_ptr<Dense> q_proj_, k_proj_, v_proj_, o_proj_, gate_proj_, up_proj_, down_proj_;
};

/// Hidden states [n, T, hidden] at each sequence's last real token -> [n, hidden]: the rightmost
/// position where `mask` is true (right or left padding, as transformers' sequence
/// classification), else the last position.
torch::Tensor last_token(const torch::Tensor& h, const torch::Tensor& mask) {
  const auto n = h.size(0), t = h.size(1);
  if (!mask.defined()) return h.select(1, t - 1);
  const auto index = (torch::arange(t, mask.options().dtype(torch::kInt64)) * mask.to(torch::kInt64)).argmax(-1);
  return h.gather(1, index.view({n, 1, 1}).expand({n, 1, h.size(2)})).squeeze(1);
}

/// lm_head and cross-entropy fused: the summed loss of hidden states h [N, H] under weight w [V, H]
/// (h in w's dtype) against targets [N] (kIgnoreIndex skipped), `chunk` rows at a time. Each
/// chunk's logits are h_c w^T in w's dtype taken to float32, as lm_head then the float32 loss
/// compute them; only the float32 log-sum-exp of each row is kept for backward, which computes
/// every chunk's logits again: d logits = softmax - one_hot (times the incoming gradient), cast to
/// w's dtype, d h_c = d logits w, d w += d logits^T h_c (summed in float32).
class ChunkedCrossEntropy final : public torch::autograd::Function<ChunkedCrossEntropy> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& w,
                               const torch::Tensor& targets, std::int64_t chunk) {
    const auto rows = h.size(0);
    auto lse = torch::empty({rows}, h.options().dtype(torch::kFloat32));
    auto total = torch::zeros({}, h.options().dtype(torch::kFloat32));
    for (std::int64_t start = 0; start < rows; start += chunk) {
      const auto n = std::min(chunk, rows - start);
      const auto logits = torch::mm(h.narrow(0, start, n), w.t()).to(torch::kFloat32);
      const auto row_lse = torch::logsumexp(logits, 1);
      lse.narrow(0, start, n).copy_(row_lse);
      const auto t = targets.narrow(0, start, n);
      const auto valid = t != kIgnoreIndex;
      const auto picked = logits.gather(1, t.clamp_min(0).unsqueeze(1)).squeeze(1);
      total += torch::where(valid, row_lse - picked, torch::zeros_like(row_lse)).sum();
    }
    ctx->save_for_backward({h, w, targets, lse});
    ctx->saved_data["chunk"] = chunk;
    return total;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &h = saved[0], &w = saved[1], &targets = saved[2], &lse = saved[3];
    const auto chunk = ctx->saved_data["chunk"].toInt();
    const auto rows = h.size(0);
    const auto scale = grad_outputs[0].to(torch::kFloat32);
    auto grad_h = torch::empty_like(h);
    auto grad_w = torch::zeros(w.sizes(), w.options().dtype(torch::kFloat32));
    for (std::int64_t start = 0; start < rows; start += chunk) {
      const auto n = std::min(chunk, rows - start);
      const auto hc = h.narrow(0, start, n);
      auto p = torch::mm(hc, w.t()).to(torch::kFloat32).sub_(lse.narrow(0, start, n).unsqueeze(1)).exp_();
      const auto t = targets.narrow(0, start, n);
      const auto valid = (t != kIgnoreIndex).to(torch::kFloat32);
      p.scatter_add_(1, t.clamp_min(0).unsqueeze(1), -valid.unsqueeze(1));  // softmax - one_hot on counted rows
      p.mul_((valid * scale).unsqueeze(1));
      const auto dz = p.to(w.scalar_type());
      grad_h.narrow(0, start, n).copy_(torch::mm(dz, w));
      grad_w.add_(torch::mm(dz.t(), hc));
    }
    return {grad_h, grad_w.to(w.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

/// Final RMSNorm, then lm_head ([n, T, vocab] logits) or, at the last real token, score ([n, classes]).
/// With loss_chunk_tokens, a causal LM's forward of an input that requires grad (training) stops at
/// the norm: the model's loss applies lm_head fused with the cross-entropy (ChunkedCrossEntropy).
class HeadUnit final : public Unit {
 public:
  /// `tied`: the embedding weight, shared as lm_head's (tie_word_embeddings), else undefined.
  HeadUnit(const LlamaConfig& c, const torch::Tensor& tied)
      : causal_lm_(c.causal_lm), fused_loss_(c.causal_lm && c.loss_chunk_tokens > 0) {
    norm_ = register_module("norm", std::make_shared<RmsNorm>(c.hidden_size, c.rms_norm_eps, c.fused_ops));
    if (!causal_lm_)
      out_ = register_module("score", std::make_shared<Dense>(c.hidden_size, c.num_classes, false));
    else if (tied.defined())
      out_ = register_module("lm_head", std::make_shared<Dense>(tied));
    else
      out_ = register_module("lm_head", std::make_shared<Dense>(c.hidden_size, c.vocab_size, false));
  }
  torch::Tensor forward(const torch::Tensor& x, const BatchContext& context) override {
    const auto h = norm_->forward(x);
    // Decided by the input, not by the grad mode: activation checkpointing runs a unit's forward with
    // gradients off, then again with them on in backward, and both must return the same tensor.
    returned_hidden_ = fused_loss_ && x.requires_grad();
    if (returned_hidden_) return h;
    return out_->forward(causal_lm_ ? h : last_token(h, context.mask));
  }
  /// The last forward left lm_head to the loss: a causal LM with loss_chunk_tokens, given an input
  /// that requires grad (training; evaluation and inference get logits).
  bool returned_hidden() const { return returned_hidden_; }
  const torch::Tensor& lm_head_weight() const { return out_->weight; }

 private:
  bool causal_lm_;
  bool fused_loss_;
  bool returned_hidden_ = false;
  std::shared_ptr<RmsNorm> norm_;
  std::shared_ptr<Dense> out_;
};

/// Adds the Hugging Face names and config, and language-model metrics for causal_lm.
class LlamaModel final : public Model {
 public:
  explicit LlamaModel(LlamaConfig config) : config_(std::move(config)) {}
  void set_head(std::shared_ptr<HeadUnit> head) { head_ = std::move(head); }

  /// With loss_chunk_tokens in training, `output` is the head's normalized hidden state (as float32):
  /// lm_head and the cross-entropy run fused, a chunk of tokens at a time.
  torch::Tensor loss(const torch::Tensor& output, const Batch& batch) const override {
    if (!head_ || !head_->returned_hidden()) return Model::loss(output, batch);
    const auto& w = head_->lm_head_weight();
    if (output.size(-1) != config_.hidden_size || w.numel() != config_.vocab_size * config_.hidden_size)
      throw Error(fmt::format("llama: loss_chunk_tokens = {} applies lm_head inside the loss, but {}.",
                              config_.loss_chunk_tokens,
                              output.size(-1) != config_.hidden_size
                                  ? fmt::format("the output given to the loss has {} features, not the hidden size {} "
                                                "(it is not the output of the model's last forward)",
                                                output.size(-1), config_.hidden_size)
                                  : std::string("lm_head's weight is not whole there (the strategy freed the last unit "
                                                "after its forward)")),
                  "Set [model] loss_chunk_tokens = 0, or use a strategy that keeps the last unit gathered into its "
                  "backward (every built-in one does).");
    const auto h = output.reshape({-1, output.size(-1)}).to(w.scalar_type());
    return ChunkedCrossEntropy::apply(h, w, batch.targets.reshape({-1}), config_.loss_chunk_tokens);
  }

  std::vector<std::pair<std::string, std::string>> external_names() const override {
    std::vector<std::pair<std::string, std::string>> names{{"embed.weight", "model.embed_tokens.weight"}};
    for (std::int64_t i = 0; i < config_.num_layers; ++i) {
      const auto block = "block" + std::to_string(i) + ".", layer = "model.layers." + std::to_string(i) + ".";
      names.emplace_back(block + "attn_norm.weight", layer + "input_layernorm.weight");
      for (const std::string proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
        names.emplace_back(block + proj + ".weight", layer + "self_attn." + proj + ".weight");
        if (proj == "o_proj" ? config_.o_bias() : config_.qkv_bias())
          names.emplace_back(block + proj + ".bias", layer + "self_attn." + proj + ".bias");
      }
      if (config_.qk_norm())
        for (const std::string norm : {"q_norm", "k_norm"})
          names.emplace_back(block + norm + ".weight", layer + "self_attn." + norm + ".weight");
      names.emplace_back(block + "mlp_norm.weight", layer + "post_attention_layernorm.weight");
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
        names.emplace_back(block + proj + ".weight", layer + "mlp." + proj + ".weight");
    }
    names.emplace_back("head.norm.weight", "model.norm.weight");
    if (config_.causal_lm)
      names.emplace_back("head.lm_head.weight", "lm_head.weight");  // with tied embeddings, an alias of embed.weight
    else
      names.emplace_back("head.score.weight", "score.weight");
    return names;
  }

  std::string external_config() const override { return hf_config_json(config_); }

  /// causal_lm: token accuracy, perplexity = exp(mean loss per token), bits per token = mean loss / ln 2.
  Metrics finalize_metrics(const std::map<std::string, double>& sums, double mean_loss) const override {
    if (!config_.causal_lm) return Model::finalize_metrics(sums, mean_loss);
    Metrics metrics{classification_metrics(sums).front()};  // accuracy (no F1, even for a 2-token vocabulary)
    metrics.emplace_back("perplexity", std::exp(mean_loss));
    metrics.emplace_back("bits_per_token", mean_loss / std::log(2.0));
    return metrics;
  }

 private:
  LlamaConfig config_;
  std::shared_ptr<HeadUnit> head_;
};

/// Training FLOPs per sample by PaLM's estimate (Chowdhery et al. 2022, appendix B): per token
/// 6 N + 12 L H Q T, where N counts the matmul weights (q, k, v, o, gate, up, down of every block,
/// plus lm_head; not the embedding lookup, norms or biases), L layers, H query heads, Q head_dim
/// and T = seq_len (the T x T scores and weighted values, not halved for the causal mask); times
/// T tokens. The classification head (score) runs at one position per sample, so it counts once.
std::int64_t flops_per_sample(const LlamaConfig& c) {
  const std::int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim, t = c.seq_len;
  const std::int64_t per_layer = c.hidden_size * q + 2 * c.hidden_size * kv + q * c.hidden_size  // q, k, v, o
                                 + 3 * c.hidden_size * c.intermediate_size;                     // gate, up, down
  const std::int64_t per_token = 6 * c.num_layers * per_layer + 12 * c.num_layers * c.num_heads * c.head_dim * t;
  const std::int64_t head = c.hidden_size * (c.causal_lm ? c.vocab_size : c.num_classes);
  return t * per_token + 6 * head * (c.causal_lm ? t : 1);
}

std::shared_ptr<Model> make_llama(const LlamaOptions& options, const ModelContext& context) {
  const LlamaConfig c = resolve_config(options, context);
  auto model = std::make_shared<LlamaModel>(c);
  auto embed = std::make_shared<EmbedUnit>(c.vocab_size, c.hidden_size);
  model->add_unit("embed", embed);
  const auto tables = std::make_shared<BatchTables>(c);  // one batch's RoPE tables and mask, for every block
  for (std::int64_t i = 0; i < c.num_layers; ++i)
    model->add_unit("block" + std::to_string(i), std::make_shared<BlockUnit>(c, tables));
  // A tied lm_head registers the embedding's tensor under its own name too, so the two names
  // share one TensorImpl: replicated plans hold it once (see engine.hpp's aliases_).
  const bool tied = c.causal_lm && c.tie_word_embeddings;
  auto head = std::make_shared<HeadUnit>(c, tied ? embed->weight : torch::Tensor());
  model->add_unit("head", head);
  model->set_head(head);
  model->set_flops_per_sample(flops_per_sample(c), "T (6 N + 12 L H Q T) + 6 x head (PaLM appendix B: N matmul weights, L layers, H heads, Q head_dim, T tokens per sample)");
  return model;
}

/// Parameters of one block: 2 H (two RMSNorms) + 2 H Q + 2 H K (q, o and k, v) + 3 H I (gate,
/// up, down); biases Q + 2 K on q/k/v (attention_bias, qwen2) and H on o (attention_bias); 2 head_dim
/// for Qwen3's q and k norms.
double layer_parameters(const LlamaConfig& c) {
  const auto f = [](std::int64_t v) { return static_cast<double>(v); };
  const double h = f(c.hidden_size), q = f(c.num_heads) * f(c.head_dim), kv = f(c.num_kv_heads) * f(c.head_dim);
  return 2 * h + 2 * h * q + 2 * h * kv + 3 * h * f(c.intermediate_size) + (c.qkv_bias() ? q + 2 * kv : 0.0) +
         (c.o_bias() ? h : 0.0) + (c.qk_norm() ? 2 * f(c.head_dim) : 0.0);
}

/// Parameters of make_llama's model, without building it (resolve_config reads config_from's
/// config.json, never weights). H hidden, Q = heads x head_dim, K = kv_heads x head_dim, I
/// intermediate, V vocabulary, L layers: embed V H; per layer layer_parameters(); head H (norm) +
/// H V (lm_head, 0 when tied to the embedding) or H classes (score). In doubles.
double estimate_llama(const LlamaOptions& options, const ModelContext& context) {
  const LlamaConfig c = resolve_config(options, context);
  const auto f = [](std::int64_t v) { return static_cast<double>(v); };
  const double h = f(c.hidden_size);
  const double layer = layer_parameters(c);
  const double out = !c.causal_lm ? h * f(c.num_classes) : c.tie_word_embeddings ? 0.0 : h * f(c.vocab_size);
  return f(c.vocab_size) * h + f(c.num_layers) * layer + h + out;
}

/// Memory of make_llama's model without building it: parameters per unit (embed, each block,
/// head; as estimate_llama) and activations held between forward and backward per sample, by the
/// standard transformer estimate (Korthikanti et al. 2022, "Reducing Activation Recomputation in
/// Large Transformer Models", section 4.1): per layer s b h (34 + 5 a s / h) bytes with 16-bit
/// activations (s tokens, b samples, h hidden, a heads), so per sample (b = 1) and float32
/// activations 2 s h (34 + 5 a s / h) bytes; times L layers. Plus the head's: the final norm's
/// input s h x 4 bytes and, for a causal LM, the float32 logits and their log-softmax, 2 s V x 4
/// (none with loss_chunk_tokens: a chunk's logits are transient, not held per sample).
/// The estimate is the paper's GPT block (4h MLP, full multi-head K and V, dropout masks): an upper
/// bound for Llama's grouped-query attention and for fused attention kernels that never store the
/// a s^2 scores, close for its SwiGLU MLP of ~2.75 h.
ModelMemoryEstimate estimate_llama_memory(const LlamaOptions& options, const ModelContext& context) {
  const LlamaConfig c = resolve_config(options, context);
  const auto f = [](std::int64_t v) { return static_cast<double>(v); };
  const double h = f(c.hidden_size);
  const double s = f(c.seq_len), a = f(c.num_heads);
  const double layer = layer_parameters(c);
  const double out = !c.causal_lm ? h * f(c.num_classes) : c.tie_word_embeddings ? 0.0 : h * f(c.vocab_size);
  ModelMemoryEstimate m;
  m.unit_parameters.push_back(f(c.vocab_size) * h);
  for (std::int64_t i = 0; i < c.num_layers; ++i) m.unit_parameters.push_back(layer);
  m.unit_parameters.push_back(h + out);
  const double per_layer_16bit = s * h * (34.0 + 5.0 * a * s / h);
  m.activation_bytes_per_sample = f(c.num_layers) * 2.0 * per_layer_16bit + s * h * 4.0
                                  + (c.causal_lm && c.loss_chunk_tokens == 0 ? 2.0 * s * f(c.vocab_size) * 4.0 : 0.0);
  return m;
}

void register_llama(Registry& registry) {
  registry.add_model("llama",
                     "Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU) with Hugging Face names and "
                     "config (llama, mistral, qwen2, qwen3); causal LM or sequence classification; one unit per layer",
                     llama_schema(), make_llama, estimate_llama, estimate_llama_memory);
}

}  // namespace
}  // namespace strata::llama

STRATA_PLUGIN(model, "llama", "0.1.0", strata::llama::register_llama)
