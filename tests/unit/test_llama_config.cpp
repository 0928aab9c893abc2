// The llama plugin's config_from: every key of a Hugging Face config.json that changes the model's
// math is read in each layout transformers writes (4.x: top-level rope_theta and rope_scaling;
// 5.x: rope_parameters), or refused with an error naming the file and the key. What the model
// made of a file shows in external_config(), the config.json it would save.
#include "test_support.hpp"
#include "bundled_plugins.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "plugin_loader.hpp"
#include "strata/errors.hpp"
#include "strata/json.hpp"
#include "strata/model.hpp"
#include "strata/registry.hpp"

namespace {

using strata::test::bundled_plugins;

/// A small Llama's config.json with `extra` members (", \"key\": value, ...") appended; of another
/// model_type of the family with `type`.
std::string config_json(const std::string& extra, const std::string& type = "llama") {
  return R"({"model_type": ")" + type + R"(", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128)"
         + extra + "}";
}

/// The llama model built from a config.json holding `json`, on token sequences of length 16.
std::shared_ptr<strata::Model> build(const strata::test::TempDir& dir, const std::string& json) {
  dir.write("config.json", json);
  const auto& schema = bundled_plugins().at(strata::PluginKind::kModel, "llama").schema;
  strata::Options options = schema.defaults();
  options.set("config_from", dir.path().string());
  strata::ModelContext context;
  context.data.input_shape = {16};
  context.data.input_dtype = torch::kInt64;
  context.data.vocab_size = 50;
  context.data.seq_len = 16;
  return bundled_plugins().create_model("llama", options, context);
}

/// The config.json the model built from `json` would save: what it read.
strata::Json read_back(const std::string& json) {
  strata::test::TempDir dir;
  return strata::Json::parse(build(dir, json)->external_config());
}

/// The member at a dotted `path`, which must be there.
const strata::Json& member(const strata::Json& json, const std::string& path) {
  const strata::Json* v = json.at_path(path);
  REQUIRE_MESSAGE(v != nullptr, "no " << path << " in " << json.dump(-1));
  return *v;
}
double number(const strata::Json& json, const std::string& path) { return member(json, path).number_or(-1); }

/// Building from `json` throws an OptionError at config_from whose message names the file and
/// holds every fragment.
void check_refused(const std::string& json, const std::vector<std::string>& fragments) {
  strata::test::TempDir dir;
  try {
    build(dir, json);
    FAIL("accepted: " << json);
  } catch (const strata::OptionError& e) {
    const std::string message = e.what();
    CHECK(e.option() == "config_from");
    CHECK_MESSAGE(message.find((dir.path() / "config.json").string()) != std::string::npos, message);
    for (const auto& fragment : fragments)
      CHECK_MESSAGE(message.find(fragment) != std::string::npos, "\"" << fragment << "\" not in: " << message);
    CHECK_MESSAGE(!e.fix().empty(), message);
  }
}

const std::string kLlama3 = R"("factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64)";

}  // namespace

TEST_CASE("llama config_from: rope_theta at the top level (transformers 4) or in rope_parameters (5)") {
  for (const std::string& rope : {
           std::string(R"(, "rope_theta": 12345.0, "rope_scaling": null)"),         // 4.x
           std::string(R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 12345.0})"),  // 5.x
           std::string(R"(, "rope_theta": 12345.0, "rope_parameters": {"rope_theta": 12345.0})"),   // both, agreeing
           std::string(R"(, "rope_theta": 12345.0, "rope_scaling": {}, "rope_parameters": null)"),
           std::string(R"(, "rope_theta": 12345, "rope_scaling": {"rope_type": "default"})"),
       }) {
    CAPTURE(rope);
    const strata::Json read = read_back(config_json(rope));
    CHECK(number(read, "rope_theta") == 12345.0);
    CHECK(member(read, "rope_scaling").is_null());
  }
  CHECK(number(read_back(config_json("")), "rope_theta") == 10000.0);  // transformers' default
}

TEST_CASE("llama config_from: Llama 3 rope scaling in either layout") {
  for (const std::string& rope : {
           R"(, "rope_theta": 12345.0, "rope_scaling": {"rope_type": "llama3", )" + kLlama3 + "}",  // 4.43+
           R"(, "rope_theta": 12345.0, "rope_scaling": {"type": "llama3", )" + kLlama3 + "}",  // the older name
           R"(, "rope_parameters": {"rope_type": "llama3", "rope_theta": 12345.0, )" + kLlama3 + "}",  // 5.x
       }) {
    CAPTURE(rope);
    const strata::Json read = read_back(config_json(rope));
    CHECK(number(read, "rope_theta") == 12345.0);
    CHECK(member(read, "rope_scaling.rope_type").string_or("") == "llama3");
    CHECK(number(read, "rope_scaling.factor") == 8.0);
    CHECK(number(read, "rope_scaling.low_freq_factor") == 1.0);
    CHECK(number(read, "rope_scaling.high_freq_factor") == 4.0);
    CHECK(number(read, "rope_scaling.original_max_position_embeddings") == 64);
  }
  // transformers 5 takes a missing original_max_position_embeddings from the top level, then from
  // max_position_embeddings.
  const std::string partial = R"("factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0)";
  CHECK(number(read_back(config_json(R"(, "rope_parameters": {"rope_type": "llama3", )" + partial + "}")),
               "rope_scaling.original_max_position_embeddings") == 128);
  CHECK(number(read_back(config_json(R"(, "original_max_position_embeddings": 32, "rope_parameters": )"
                                     R"({"rope_type": "llama3", )" + partial + "}")),
               "rope_scaling.original_max_position_embeddings") == 32);
}

TEST_CASE("llama config_from: head_dim, tie_word_embeddings, rms_norm_eps and attention_bias are read") {
  const strata::Json read = read_back(config_json(
      R"(, "head_dim": 32, "tie_word_embeddings": true, "rms_norm_eps": 1e-5, "attention_bias": true,
         "hidden_act": "swish", "attention_dropout": 0.0, "partial_rotary_factor": 1.0, "pretraining_tp": 2)"));
  CHECK(number(read, "head_dim") == 32);
  CHECK(member(read, "tie_word_embeddings").bool_or(false));
  CHECK(number(read, "rms_norm_eps") == 1e-5);
  CHECK(member(read, "attention_bias").bool_or(false));
  const strata::Json defaults = read_back(config_json(R"(, "head_dim": null)"));
  CHECK(number(defaults, "head_dim") == 16);  // hidden_size / num_attention_heads
  CHECK(!member(defaults, "tie_word_embeddings").bool_or(true));
  CHECK(number(defaults, "rms_norm_eps") == 1e-6);
}

TEST_CASE("llama config_from: keys the model cannot honour are refused by name") {
  check_refused(config_json(R"(, "rope_scaling": {"rope_type": "linear", "factor": 2.0})"),
                {"rope_scaling.rope_type \"linear\"", "default and llama3"});
  check_refused(config_json(R"(, "rope_scaling": {"type": "dynamic", "factor": 2.0})"),
                {"rope_scaling.rope_type \"dynamic\""});
  check_refused(config_json(R"(, "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0})"),
                {"rope_parameters.rope_type \"yarn\""});
  check_refused(config_json(R"(, "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0})"),
                {"rope_parameters.rope_type \"longrope\""});
  check_refused(config_json(R"(, "partial_rotary_factor": 0.5)"), {"\"partial_rotary_factor\" is 0.5"});
  check_refused(config_json(R"(, "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.5})"),
                {"\"rope_parameters.partial_rotary_factor\" is 0.5"});
  check_refused(config_json(R"(, "hidden_act": "gelu")"), {"hidden_act is \"gelu\""});
  check_refused(config_json(R"(, "mlp_bias": true)"), {"mlp_bias is true"});
  check_refused(config_json(R"(, "attention_dropout": 0.1)"), {"attention_dropout is 0.1"});
  check_refused(config_json(R"(, "rope_parameters": [])"), {"\"rope_parameters\" must be an object"});
  check_refused(config_json(R"(, "rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0})"),
                {"has no \"rope_parameters.low_freq_factor\""});
}

TEST_CASE("llama config_from: a file whose two layouts disagree is refused") {
  // transformers 4 reads the top-level rope_theta and rope_scaling, 5 the dicts' values first.
  check_refused(config_json(R"(, "rope_theta": 10000.0, "rope_parameters": {"rope_theta": 12345.0})"),
                {"rope_theta 10000 and rope_parameters.rope_theta 12345 disagree"});
  check_refused(config_json(R"(, "rope_theta": 10000.0, "rope_scaling": {"rope_type": "default", "rope_theta": 5.0})"),
                {"rope_theta 10000 and rope_scaling.rope_theta 5 disagree"});
  check_refused(config_json(R"(, "rope_scaling": {"rope_type": "llama3", )" + kLlama3
                            + R"(}, "rope_parameters": {"rope_type": "default"})"),
                {"rope_scaling and rope_parameters describe different rotary embeddings"});
  check_refused(config_json(R"(, "rope_scaling": {"rope_type": "llama3", "type": "linear"})"),
                {"rope_scaling.rope_type \"llama3\" and rope_scaling.type \"linear\" disagree"});
  check_refused(config_json(R"(, "original_max_position_embeddings": 32, "rope_parameters": {"rope_type": "llama3", )"
                            + kLlama3 + "}"),
                {"original_max_position_embeddings 32 and rope_parameters.original_max_position_embeddings 64"});
}

TEST_CASE("llama config_from: the family's variants (mistral, qwen2, qwen3) build their own layers and save their type") {
  auto parameters = [](const std::string& json) {
    strata::test::TempDir dir;
    std::vector<std::string> names;
    for (const auto& p : build(dir, json)->named_parameters()) names.push_back(p.key());
    return names;
  };
  auto has = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  const auto qwen2 = parameters(config_json("", "qwen2"));  // biases on q, k, v; none on o
  CHECK(has(qwen2, "block0.q_proj.bias"));
  CHECK(has(qwen2, "block0.v_proj.bias"));
  CHECK_FALSE(has(qwen2, "block0.o_proj.bias"));
  CHECK_FALSE(has(qwen2, "block0.q_norm.weight"));
  const auto qwen3 = parameters(config_json("", "qwen3"));  // q and k norms; no biases unless attention_bias
  CHECK(has(qwen3, "block0.q_norm.weight"));
  CHECK(has(qwen3, "block0.k_norm.weight"));
  CHECK_FALSE(has(qwen3, "block0.q_proj.bias"));
  const auto mistral = parameters(config_json(R"(, "sliding_window": 16)", "mistral"));
  CHECK_FALSE(has(mistral, "block0.q_proj.bias"));
  for (const std::string type : {"mistral", "qwen2", "qwen3"}) {
    const auto saved = read_back(config_json("", type));
    CHECK(member(saved, "model_type").string_or("") == type);
  }
  CHECK(member(read_back(config_json("", "qwen2")), "architectures").elements()->front().string_or("") ==
        "Qwen2ForCausalLM");
  // A window no shorter than the sequences (16 tokens) changes nothing; a shorter one is refused.
  check_refused(config_json(R"(, "sliding_window": 8)", "mistral"), {"sliding window of 8", "16 long"});
  check_refused(config_json(R"(, "sliding_window": 8, "use_sliding_window": true)", "qwen2"), {"sliding window of 8"});
  CHECK(parameters(config_json(R"(, "sliding_window": 8, "use_sliding_window": false)", "qwen2")).size() > 0);
  check_refused(config_json("", "gpt2"), {"model_type is \"gpt2\"", "qwen3"});
}
