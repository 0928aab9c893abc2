#pragma once
// Options of the `llama` model plugin and their resolution into the shapes the model is built
// with: a preset or a Hugging Face config.json gives the defaults, options set in [model] refine
// them, the data fills in what is left (vocabulary, task, sequence length).

#include <cstdint>
#include <optional>
#include <string>

#include <strata/json.hpp>
#include <strata/model.hpp>
#include <strata/options.hpp>

namespace strata::llama {

/// The [model] section. Numbers equal to 0 (and booleans false) mean "from the preset or
/// config_from", so an option set in the experiment can be told from a default.
struct LlamaOptions {
  std::string preset;              ///< "", "debug", "tinyllama-1.1b" or "llama-3.2-1b"
  std::string config_from;         ///< Hugging Face model directory or config.json; "" = none
  std::string task;                ///< "causal_lm" or "sequence_classification"; "" = from the data
  std::int64_t vocab_size = 0;     ///< 0: the preset's, else the data's
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;   ///< 0: num_heads (plain multi-head attention)
  std::int64_t head_dim = 0;       ///< 0: hidden_size / num_heads
  double rope_theta = 0;
  double rms_norm_eps = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  /// causal_lm: 0, lm_head's logits for the whole micro-batch, then cross-entropy on them (as
  /// transformers); N > 0: lm_head and cross-entropy fused, N tokens at a time, so that neither the
  /// logits nor their gradient exist for more than N tokens at once (recomputed in backward).
  std::int64_t loss_chunk_tokens = 0;
  /// RMSNorm with its residual add, RoPE in place and SwiGLU as fused ops (models/common/fused_ops.hpp:
  /// CUDA kernels on a GPU); false: transformers' unfused ops.
  bool fused_ops = false;
};

/// The documented, validated schema of LlamaOptions.
Schema<LlamaOptions> llama_schema();

/// Llama 3 frequency-dependent RoPE scaling (transformers' rope_type "llama3"); off by default.
struct RopeScaling {
  bool llama3 = false;
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  std::int64_t original_max_position_embeddings = 8192;
  bool operator==(const RopeScaling&) const = default;
};

/// Everything the model is built from, resolved and validated.
struct LlamaConfig {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  double rope_theta = 10000;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;     ///< biases on q/k/v/o_proj (Llama, Qwen3)
  /// The Hugging Face family: "llama", "mistral" (Llama's math; a sliding window, here refused
  /// where it would cut a sequence), "qwen2" (biases on q/k/v_proj but not o_proj) or "qwen3"
  /// (RMSNorm over each head of q and k, before the rotary embedding).
  std::string model_type = "llama";
  /// A sliding attention window as the config gives it (0: none); it changes nothing for
  /// sequences no longer than it, and longer ones are refused.
  std::int64_t sliding_window = 0;
  bool qkv_bias() const noexcept { return attention_bias || model_type == "qwen2"; }
  bool o_bias() const noexcept { return attention_bias; }
  bool qk_norm() const noexcept { return model_type == "qwen3"; }
  RopeScaling rope_scaling;
  std::int64_t max_position_embeddings = 2048;
  bool causal_lm = true;           ///< else sequence classification
  std::int64_t num_classes = 0;    ///< sequence classification only
  std::int64_t seq_len = 0;        ///< tokens per sample
  std::int64_t loss_chunk_tokens = 0;  ///< LlamaOptions::loss_chunk_tokens (not part of a Hugging Face config)
  bool fused_ops = false;              ///< LlamaOptions::fused_ops (neither)
  std::optional<Json> pad_token_id, bos_token_id, eos_token_id;  ///< copied into external_config()
};

/// Resolves `options` against the preset or config file and the data; throws OptionError naming
/// the option (and the file and key for config_from) when something does not fit.
LlamaConfig resolve_config(const LlamaOptions& options, const ModelContext& context);

/// A Hugging Face config.json for `config` (LlamaForCausalLM or LlamaForSequenceClassification).
std::string hf_config_json(const LlamaConfig& config);

}  // namespace strata::llama
