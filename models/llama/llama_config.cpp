#include "llama_config.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fmt/std.h>

#include <strata/errors.hpp>

namespace strata::llama {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kPresets = {"", "debug", "tinyllama-1.1b", "llama-3.2-1b"};
constexpr double kMaxWidth = 2147483648.0;  // 2^31: a larger size is certainly a mistake
constexpr double kMaxLayers = 65536;

/// The defaults of a preset; fields left 0 are derived later (see resolve_config).
LlamaConfig preset_config(const std::string& name) {
  LlamaConfig c;
  if (name.empty()) {  // a small model for experiments; vocabulary from the data
    c.hidden_size = 256, c.num_layers = 4, c.num_heads = 4;
  } else if (name == "debug") {  // tests: seconds on a CPU
    c.hidden_size = 64, c.intermediate_size = 172, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2;
  } else if (name == "tinyllama-1.1b") {  // TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T config.json
    c.vocab_size = 32000, c.hidden_size = 2048, c.intermediate_size = 5632, c.num_layers = 22, c.num_heads = 32;
    c.num_kv_heads = 4, c.rope_theta = 10000, c.rms_norm_eps = 1e-5, c.max_position_embeddings = 2048;
    c.bos_token_id = Json(1), c.eos_token_id = Json(2);
  } else if (name == "llama-3.2-1b") {  // meta-llama/Llama-3.2-1B config.json
    c.vocab_size = 128256, c.hidden_size = 2048, c.intermediate_size = 8192, c.num_layers = 16, c.num_heads = 32;
    c.num_kv_heads = 8, c.head_dim = 64, c.rope_theta = 500000, c.rms_norm_eps = 1e-5, c.tie_word_embeddings = true;
    c.rope_scaling = {true, 32, 1, 4, 8192};
    c.max_position_embeddings = 131072;
    c.bos_token_id = Json(128000), c.eos_token_id = Json(128001);
  }
  return c;
}

/// Reads a Hugging Face LlamaConfig: every key that changes the model's math is either honoured
/// or refused, never defaulted past. transformers 4.x writes `rope_theta` at the top level and the
/// scaling in `rope_scaling` (null without); 5.x writes both in `rope_parameters`
/// ({"rope_type": "default", "rope_theta": ...}) and still reads the 4.x keys, preferring the
/// dict's. Both layouts are read; a file holding both must say the same thing in each, since 4.x
/// and 5.x would read it differently otherwise. Every error names the file and the key.
class HfConfigReader {
 public:
  explicit HfConfigReader(fs::path path) : path_(std::move(path)) {
    if (fs::is_directory(path_)) path_ /= "config.json";
    std::ifstream in(path_);
    if (!in)
      fail(fmt::format("cannot read the Hugging Face config {}: {}.", path_, std::strerror(errno)),
           "Point config_from at a model directory holding config.json, or at the file itself.");
    std::stringstream text;
    text << in.rdbuf();
    try {
      root_ = Json::parse(text.str());
    } catch (const Error& e) {
      fail(fmt::format("{} is not valid JSON: {}", path_, e.what()), "Fix or re-download the file.");
    }
    if (!root_.members()) fail(fmt::format("{} is not a JSON object.", path_), "Fix or re-download the file.");
  }

  LlamaConfig read() const {
    LlamaConfig c;
    if (auto type = string_key("model_type")) {
      if (*type != "llama" && *type != "mistral" && *type != "qwen2" && *type != "qwen3")
        fail(fmt::format("{}: model_type is \"{}\"; the llama plugin reads the Llama family: llama, mistral, qwen2 "
                         "and qwen3.", path_, *type),
             "Use a checkpoint of one of those families.");
      c.model_type = *type;
    }
    refuse_what_the_model_lacks();
    c.vocab_size = int_key("vocab_size");
    c.hidden_size = int_key("hidden_size");
    c.intermediate_size = int_key("intermediate_size");
    c.num_layers = int_key("num_hidden_layers");
    c.num_heads = int_key("num_attention_heads");
    c.num_kv_heads = int_key("num_key_value_heads", c.num_heads);
    c.head_dim = int_key("head_dim", c.hidden_size / c.num_heads);  // transformers' default (floor)
    c.rms_norm_eps = number_key("rms_norm_eps", 1e-6);
    c.tie_word_embeddings = bool_key("tie_word_embeddings", false);
    // Mistral and Qwen2 have no such key: their projections' biases are fixed (none; q/k/v only).
    c.attention_bias = c.model_type == "mistral" || c.model_type == "qwen2" ? false : bool_key("attention_bias", false);
    c.sliding_window = read_sliding_window(c.model_type);
    c.max_position_embeddings = int_key("max_position_embeddings", 2048);
    const Rope rope = read_rope(c.max_position_embeddings);
    c.rope_theta = rope.theta;
    c.rope_scaling = rope.scaling;
    for (auto [key, field] : {std::pair{"pad_token_id", &c.pad_token_id}, std::pair{"bos_token_id", &c.bos_token_id},
                              std::pair{"eos_token_id", &c.eos_token_id}})
      if (const Json* v = find(key)) *field = *v;
    return c;
  }
  const fs::path& path() const { return path_; }

 private:
  static constexpr const char* kFix = "Point config_from at the config.json of a Llama checkpoint, or fix the file.";
  static constexpr double kDefaultTheta = 10000;  // transformers' rope_theta when a file names none

  /// The rotary embedding a file describes in one of its layouts.
  struct Rope {
    double theta = kDefaultTheta;
    RopeScaling scaling;
    bool operator==(const Rope&) const = default;
  };

  [[noreturn]] void fail(const std::string& message, std::string fix = kFix) const {
    throw OptionError("config_from", message, std::move(fix));
  }
  /// `key` of `in` (the file's top level by default), or nullptr when absent or null.
  const Json* find(const char* key, const Json* in = nullptr) const {
    const Json* v = (in ? *in : root_).find(key);
    return v && !v->is_null() ? v : nullptr;
  }
  /// "key", or "section.key" for a key of a nested object: how error messages name it.
  static std::string label(const char* key, std::string_view section) {
    return section.empty() ? std::string(key) : fmt::format("{}.{}", section, key);
  }
  std::int64_t int_key(const char* key, std::optional<std::int64_t> fallback = {}, const Json* in = nullptr,
                       std::string_view section = {}) const {
    const Json* v = find(key, in);
    if (!v) {
      if (fallback) return *fallback;
      fail(fmt::format("{} has no \"{}\".", path_, label(key, section)),
           "A Llama config.json names every shape; is config_from the right file?");
    }
    const double d = v->number_or(NAN);
    if (!(d >= 1) || d != std::floor(d) || d > 1e15)
      fail(fmt::format("{}: \"{}\" must be a positive integer, got {}.", path_, label(key, section), v->dump(-1)));
    return static_cast<std::int64_t>(d);
  }
  double number_key(const char* key, std::optional<double> fallback = {}, const Json* in = nullptr,
                    std::string_view section = {}) const {
    const Json* v = find(key, in);
    if (!v) {
      if (fallback) return *fallback;
      fail(fmt::format("{} has no \"{}\".", path_, label(key, section)));
    }
    const double d = v->number_or(NAN);
    if (!(d > 0) || !std::isfinite(d))
      fail(fmt::format("{}: \"{}\" must be a positive number, got {}.", path_, label(key, section), v->dump(-1)));
    return d;
  }
  bool bool_key(const char* key, bool fallback) const {
    const Json* v = find(key);
    if (!v) return fallback;
    if (v->dump(-1) != "true" && v->dump(-1) != "false")
      fail(fmt::format("{}: \"{}\" must be true or false, got {}.", path_, key, v->dump(-1)));
    return v->bool_or(fallback);
  }
  std::optional<std::string> string_key(const char* key, const Json* in = nullptr) const {
    const Json* v = find(key, in);
    if (!v) return std::nullopt;
    return v->string_or(v->dump(-1));
  }

  /// Keys of transformers' LlamaConfig whose other values change the math of a model this plugin
  /// cannot build. (attention_bias is built; pretraining_tp no longer changes transformers' math.)
  void refuse_what_the_model_lacks() const {
    // transformers' ACT2FN maps both names to SiLU.
    if (auto act = string_key("hidden_act"); act && *act != "silu" && *act != "swish")
      fail(fmt::format("{}: hidden_act is \"{}\"; the llama plugin's MLP is SwiGLU (silu) only.", path_, *act),
           "Use a Llama checkpoint with hidden_act \"silu\": the same weights would compute something else here.");
    if (bool_key("mlp_bias", false))
      fail(fmt::format("{}: mlp_bias is true; the llama plugin has bias-free MLPs.", path_),
           "Use a checkpoint without MLP biases (mlp_bias false).");
    if (const Json* v = find("attention_dropout"); v && v->number_or(NAN) != 0)
      fail(fmt::format("{}: attention_dropout is {}; the llama plugin has no dropout, so it would train another "
                       "model than the file describes.", path_, v->dump(-1)),
           "Set attention_dropout to 0.0 in the file to train without dropout.");
  }

  /// The attention window the family applies (0: none). Mistral: sliding_window (null: none) on
  /// every layer; Qwen2/3: sliding_window on the layers layer_types names "sliding_attention"
  /// (5.x), or on layers from max_window_layers when use_sliding_window is true (4.x).
  std::int64_t read_sliding_window(const std::string& type) const {
    const Json* window = find("sliding_window");
    if (window == nullptr || window->is_null()) return 0;
    const auto size = int_key("sliding_window");
    if (type == "mistral") return size;
    if (const Json* layers = find("layer_types"); layers && layers->elements()) {
      for (const auto& l : *layers->elements())
        if (l.string_or("") == "sliding_attention") return size;
      return 0;
    }
    return bool_key("use_sliding_window", false) ? size : 0;
  }

  /// partial_rotary_factor (top level in 4.x, in the rope dict in 5.x) other than 1 would rotate
  /// part of each head only; transformers' own Llama does not run it either.
  void refuse_partial_rotary(const Json* in, std::string_view section) const {
    const char* key = "partial_rotary_factor";
    if (const Json* v = find(key, in); v && v->number_or(NAN) != 1)
      fail(fmt::format("{}: \"{}\" is {}; the llama plugin rotates whole heads only.", path_, label(key, section),
                       v->dump(-1)),
           fmt::format("Remove {} or set it to 1.0.", label(key, section)));
  }

  /// The rotary embedding: rope_scaling (4.x) and rope_parameters (5.x) if present, else
  /// rope_theta alone (4.x without scaling).
  Rope read_rope(std::int64_t max_positions) const {
    refuse_partial_rotary(nullptr, {});
    const std::optional<Rope> legacy = rope_dict("rope_scaling", max_positions);
    const std::optional<Rope> current = rope_dict("rope_parameters", max_positions);
    if (legacy && current && !(*legacy == *current))
      fail(fmt::format("{}: rope_scaling and rope_parameters describe different rotary embeddings (transformers 4 "
                       "reads rope_scaling and the top-level rope_theta, 5 prefers rope_parameters' values).",
                       path_),
           "Keep one of rope_scaling and rope_parameters (transformers 5 writes rope_parameters), or make them agree.");
    if (legacy) return *legacy;
    if (current) return *current;
    return Rope{number_key("rope_theta", kDefaultTheta), {}};
  }

  /// A rope dict (`section` = "rope_scaling" or "rope_parameters"), or nothing when the key is
  /// absent, null or {} (transformers treats an empty dict as none).
  std::optional<Rope> rope_dict(const char* section, std::int64_t max_positions) const {
    const Json* s = find(section);
    if (!s) return std::nullopt;
    if (!s->members())
      fail(fmt::format("{}: \"{}\" must be an object or null, got {}.", path_, section, s->dump(-1)));
    if (s->members()->empty()) return std::nullopt;
    refuse_partial_rotary(s, section);
    Rope r;
    // The dict's rope_theta (5.x) and the top-level one (4.x) must agree when both are there.
    r.theta = number_key("rope_theta", kDefaultTheta);
    if (find("rope_theta", s)) {
      const double inner = number_key("rope_theta", {}, s, section);
      if (find("rope_theta") && inner != r.theta)
        fail(fmt::format("{}: rope_theta {} and {}.rope_theta {} disagree (transformers 4 reads the first, 5 the "
                         "second).", path_, r.theta, section, inner),
             "Keep one of them (transformers 5 writes the one in rope_parameters), or make them equal.");
      r.theta = inner;
    }
    // "type" is rope_type's older name; should both be there, 5.x reads rope_type and 4.x type.
    const auto rope_type = string_key("rope_type", s), type = string_key("type", s);
    if (rope_type && type && *rope_type != *type)
      fail(fmt::format("{}: {}.rope_type \"{}\" and {}.type \"{}\" disagree.", path_, section, *rope_type, section,
                       *type),
           "Remove \"type\" (the older name of rope_type).");
    const std::string name = rope_type ? *rope_type : type ? *type : "default";
    if (name == "default") return r;
    if (name != "llama3")
      fail(fmt::format("{}: {}.rope_type \"{}\" is not supported; the llama plugin implements the default and llama3 "
                       "rotary embeddings only.", path_, section, name),
           "Use a checkpoint without rope scaling or with Llama 3's: other scalings give other positions.");
    RopeScaling& l = r.scaling;
    l.llama3 = true;
    l.factor = number_key("factor", {}, s, section);
    l.low_freq_factor = number_key("low_freq_factor", {}, s, section);
    l.high_freq_factor = number_key("high_freq_factor", {}, s, section);
    if (!(l.high_freq_factor > l.low_freq_factor))
      fail(fmt::format("{}: {} needs high_freq_factor > low_freq_factor.", path_, section));
    // transformers 5 falls back to a top-level original_max_position_embeddings (it wins over the
    // dict's), then to max_position_embeddings; 4.x reads the dict's only.
    const char* old_len = "original_max_position_embeddings";
    const std::int64_t top = int_key(old_len, max_positions);
    l.original_max_position_embeddings = int_key(old_len, top, s, section);
    if (find(old_len) && find(old_len, s) && top != l.original_max_position_embeddings)
      fail(fmt::format("{}: {} {} and {}.{} {} disagree (transformers 5 reads the first, 4 the second).", path_,
                       old_len, top, section, old_len, l.original_max_position_embeddings),
           fmt::format("Remove the top-level {}.", old_len));
    return r;
  }

  fs::path path_;
  Json root_;
};

/// Applies options set in [model] over the preset's or file's values. With a file, a set option
/// that differs from the file is an error: the file describes weights the model must be able to load.
class Overrides {
 public:
  Overrides(LlamaConfig& config, const fs::path* file) : config_(config), file_(file) {}
  template <class T>
  void apply(const char* option, const char* hf_key, T value, T LlamaConfig::*field) {
    if (value == T{}) return;  // 0 / false: not set
    if (file_ && config_.*field != value)
      throw OptionError(option, fmt::format("{} = {} conflicts with {} = {} in {}.", option, value, hf_key,
                                            config_.*field, *file_),
                        fmt::format("Remove {} from [model]: config_from sets the shapes.", option));
    config_.*field = value;
  }

 private:
  LlamaConfig& config_;
  const fs::path* file_;
};

}  // namespace

Schema<LlamaOptions> llama_schema() {
  using O = LlamaOptions;
  Schema<O> s;
  s.option("preset", &O::preset,
           "shapes to start from: \"\" (hidden 256, 4 layers, 4 heads), debug (hidden 64, 2 layers), tinyllama-1.1b, "
           "llama-3.2-1b; options set here override it",
           one_of(kPresets))
      .option("config_from", &O::config_from,
              "Hugging Face model directory or config.json giving the shapes (options contradicting it are errors)",
              file_path())
      .option("task", &O::task, "\"\": causal_lm for next-token targets, sequence_classification for labels",
              one_of({"", "causal_lm", "sequence_classification"}))
      .option("vocab_size", &O::vocab_size, "embedding rows; 0: the preset's, else the data's vocabulary",
              between(0, kMaxWidth))
      .option("hidden_size", &O::hidden_size, "width of the residual stream; 0: the preset's",
              between(0, kMaxWidth))
      .option("intermediate_size", &O::intermediate_size,
              "SwiGLU MLP width; 0: the preset's, else 8/3 hidden_size rounded up to a multiple of 64",
              between(0, kMaxWidth))
      .option("num_layers", &O::num_layers, "decoder blocks (one unit each); 0: the preset's",
              between(0, kMaxLayers))
      .option("num_heads", &O::num_heads, "query heads; 0: the preset's", between(0, kMaxWidth))
      .option("num_kv_heads", &O::num_kv_heads,
              "key/value heads, dividing num_heads (fewer: grouped-query attention); 0: the preset's, else num_heads",
              between(0, kMaxWidth))
      .option("head_dim", &O::head_dim, "width of one head (even); 0: hidden_size / num_heads",
              between(0, kMaxWidth))
      .option("rope_theta", &O::rope_theta, "rotary embedding base; 0: the preset's (10000)", at_least(0))
      .option("rms_norm_eps", &O::rms_norm_eps, "RMSNorm epsilon; 0: the preset's (1e-6, 1e-5 for the 1B presets)",
              at_least(0))
      .option("tie_word_embeddings", &O::tie_word_embeddings,
              "lm_head shares embed.weight (false: the preset's or config's choice; llama-3.2-1b ties); zero3 and fsdp "
              "keep the embedding gathered until the head's backward")
      .option("attention_bias", &O::attention_bias,
              "biases on q/k/v/o_proj (false: the preset's or config's choice)")
      .option("loss_chunk_tokens", &O::loss_chunk_tokens,
              "causal_lm: lm_head and the cross-entropy fused, this many tokens at a time, so the float32 logits of "
              "the whole micro-batch never exist (their chunks are recomputed in backward); 0: off (logits, then "
              "cross-entropy)",
              between(0, kMaxWidth))
      .option("fused_ops", &O::fused_ops,
              "fused ops: RMSNorm with its residual add, rotary embeddings applied in place, SwiGLU, each one CUDA "
              "kernel forward and one backward on a GPU (same values on the CPU, by ATen ops); false: the unfused "
              "ops of transformers");
  return s;
}

LlamaConfig resolve_config(const LlamaOptions& o, const ModelContext& context) {
  const DataSpec& data = context.data;
  if (!data.tokens() || data.input_shape.size() != 1)
    // Option "name": the model chosen is what does not fit this data (the host reports model.name).
    throw OptionError("name",
                      "llama needs token ids shaped [T] (a dataset with a vocabulary), but the dataset gives "
                          + fmt::format("inputs shaped [{}].", fmt::join(data.input_shape, ", ")),
                      "Use a token dataset (for example text), or an image model (vit, cnn).");

  std::optional<HfConfigReader> file;
  if (!o.config_from.empty()) {
    if (!o.preset.empty())
      throw OptionError("preset", "preset and config_from both choose the shapes.", "Remove one of them.");
    fs::path path = o.config_from;
    if (path.is_relative()) path = context.config_dir / path;
    file.emplace(path);
  }
  LlamaConfig c = file ? file->read() : preset_config(o.preset);

  Overrides set(c, file ? &file->path() : nullptr);
  set.apply("vocab_size", "vocab_size", o.vocab_size, &LlamaConfig::vocab_size);
  set.apply("hidden_size", "hidden_size", o.hidden_size, &LlamaConfig::hidden_size);
  set.apply("intermediate_size", "intermediate_size", o.intermediate_size, &LlamaConfig::intermediate_size);
  set.apply("num_layers", "num_hidden_layers", o.num_layers, &LlamaConfig::num_layers);
  set.apply("num_heads", "num_attention_heads", o.num_heads, &LlamaConfig::num_heads);
  set.apply("num_kv_heads", "num_key_value_heads", o.num_kv_heads, &LlamaConfig::num_kv_heads);
  set.apply("head_dim", "head_dim", o.head_dim, &LlamaConfig::head_dim);
  set.apply("rope_theta", "rope_theta", o.rope_theta, &LlamaConfig::rope_theta);
  set.apply("rms_norm_eps", "rms_norm_eps", o.rms_norm_eps, &LlamaConfig::rms_norm_eps);
  set.apply("tie_word_embeddings", "tie_word_embeddings", o.tie_word_embeddings, &LlamaConfig::tie_word_embeddings);
  set.apply("attention_bias", "attention_bias", o.attention_bias, &LlamaConfig::attention_bias);

  // Derived shapes.
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_heads != 0)
      throw OptionError("num_heads",
                        fmt::format("num_heads {} does not divide hidden_size {}.", c.num_heads, c.hidden_size),
                        "Choose num_heads dividing hidden_size, or set head_dim.");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.intermediate_size == 0) c.intermediate_size = (8 * c.hidden_size / 3 + 63) / 64 * 64;
  if (c.vocab_size == 0) c.vocab_size = data.vocab_size;

  if (c.num_heads % c.num_kv_heads != 0)
    throw OptionError("num_kv_heads",
                      fmt::format("num_kv_heads {} does not divide num_heads {}.", c.num_kv_heads, c.num_heads),
                      "Choose num_kv_heads dividing num_heads (each key/value head serves a group of query heads).");
  if (c.head_dim % 2 != 0)
    throw OptionError("head_dim", fmt::format("head_dim {} is odd; rotary embeddings rotate pairs.", c.head_dim),
                      "Choose an even head_dim (hidden_size / num_heads, or head_dim).");
  if (data.vocab_size > c.vocab_size)
    throw OptionError("vocab_size", fmt::format("the data's vocabulary has {} ids but the model embeds only {}.",
                                                data.vocab_size, c.vocab_size),
                      "Use the tokenizer the checkpoint was trained with, or a larger vocab_size.");

  const std::string task = o.task.empty() ? (data.num_classes == 0 ? "causal_lm" : "sequence_classification") : o.task;
  c.causal_lm = task == "causal_lm";
  if (c.causal_lm && data.num_classes != 0)
    throw OptionError("task",
                      fmt::format("causal_lm needs next-token targets, but the dataset has {} classes.", data.num_classes),
                      "Use task = \"sequence_classification\", or a language-modeling dataset.");
  if (!c.causal_lm && data.num_classes < 1)
    throw OptionError("task", "sequence_classification needs labeled sequences, but the dataset has no classes.",
                      "Use task = \"causal_lm\", or a dataset of labeled sequences.");
  if (o.loss_chunk_tokens > 0 && !c.causal_lm)
    throw OptionError("loss_chunk_tokens", "loss_chunk_tokens fuses lm_head with the loss of causal_lm; "
                                           "sequence classification has a score head of a few classes.",
                      "Leave loss_chunk_tokens at 0 for sequence classification.");
  c.loss_chunk_tokens = o.loss_chunk_tokens;
  c.fused_ops = o.fused_ops;
  c.num_classes = data.num_classes;
  c.seq_len = data.seq_len > 0 ? data.seq_len : data.input_shape[0];
  c.max_position_embeddings = std::max(c.max_position_embeddings, c.seq_len);
  if (c.sliding_window > 0 && c.seq_len > c.sliding_window)
    throw OptionError("config_from",
                      fmt::format("{}'s {} attends within a sliding window of {} tokens, and the data's sequences are "
                                  "{} long: the llama plugin attends over whole sequences, so it would compute another "
                                  "model than the checkpoint's.",
                                  file ? file->path().string() : o.config_from, c.model_type, c.sliding_window,
                                  c.seq_len),
                      fmt::format("Use sequences of at most {} tokens (the dataset's seq_len).", c.sliding_window));
  if (!c.pad_token_id && data.pad_id >= 0) c.pad_token_id = Json(data.pad_id);
  return c;
}

std::string hf_config_json(const LlamaConfig& c) {
  Json j = Json::object();
  const std::string family = c.model_type == "mistral" ? "Mistral"
                             : c.model_type == "qwen2"   ? "Qwen2"
                             : c.model_type == "qwen3"   ? "Qwen3"
                                                         : "Llama";
  j["architectures"] = Json(Json::Array{Json(family + (c.causal_lm ? "ForCausalLM" : "ForSequenceClassification"))});
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["initializer_range"] = 0.02;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.llama3) {
    Json& s = j["rope_scaling"] = Json::object();
    s["rope_type"] = "llama3";
    s["factor"] = c.rope_scaling.factor;
    s["low_freq_factor"] = c.rope_scaling.low_freq_factor;
    s["high_freq_factor"] = c.rope_scaling.high_freq_factor;
    s["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (c.model_type == "llama" || c.model_type == "qwen3") j["attention_bias"] = c.attention_bias;
  j["attention_dropout"] = 0.0;
  if (c.model_type == "llama") {
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  } else {
    j["sliding_window"] = c.sliding_window > 0 ? Json(c.sliding_window) : Json(nullptr);
    if (c.model_type != "mistral") j["use_sliding_window"] = c.sliding_window > 0;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  if (!c.causal_lm) {
    Json& id2label = j["id2label"] = Json::object();
    Json& label2id = j["label2id"] = Json::object();
    for (std::int64_t k = 0; k < c.num_classes; ++k) {
      id2label[std::to_string(k)] = "LABEL_" + std::to_string(k);
      label2id["LABEL_" + std::to_string(k)] = k;
    }
  }
  return j.dump(2) + "\n";
}

}  // namespace strata::llama
