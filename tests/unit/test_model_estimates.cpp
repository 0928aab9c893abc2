// Each bundled model's parameter estimator against the model it builds: equal exactly for several
// option variants and data kinds, the constructor's errors raised without building, and absurd
// sizes answered at once with a large finite count.
#include "test_support.hpp"

#include <torch/csrc/autograd/function.h>
#include "bundled_plugins.hpp"

#include <chrono>
#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "plugin_loader.hpp"
#include "strata/dataset.hpp"
#include "strata/errors.hpp"
#include "strata/model.hpp"
#include "strata/registry.hpp"

namespace {

using namespace std::string_literals;
using I = std::int64_t;
using Ints = std::vector<std::int64_t>;
using Overrides = std::vector<std::pair<std::string, strata::OptionValue>>;

constexpr I kMaxWidth = I{1} << 31;  // the plugins' bound on widths

using strata::test::bundled_plugins;

/// Model `name`'s defaults with `overrides`, each checked against the schema as the host would.
strata::Options model_options(const std::string& name, const Overrides& overrides = {}) {
  const auto& schema = bundled_plugins().at(strata::PluginKind::kModel, name).schema;
  strata::Options o = schema.defaults();
  for (const auto& [key, value] : overrides) {
    const strata::OptionSpec* spec = schema.find(key);
    REQUIRE_MESSAGE(spec != nullptr, name << " has no option " << key);
    CHECK_MESSAGE(spec->check(value).empty(), name << "." << key << ": " << spec->check(value));
    o.set(key, value);
  }
  return o;
}

strata::ModelContext images(I channels, I side, I classes = 10) {
  strata::ModelContext c;
  c.data.input_shape = {channels, side, side};
  c.data.num_classes = classes;
  return c;
}

/// Token ids [T]: next-token targets (classes 0) or labeled sequences.
strata::ModelContext tokens(I classes = 0, I vocab = 50, I length = 16) {
  strata::ModelContext c;
  c.data.input_shape = {length};
  c.data.input_dtype = torch::kInt64;
  c.data.vocab_size = vocab;
  c.data.seq_len = length;
  c.data.num_classes = classes;
  return c;
}

double estimate(const std::string& name, const strata::Options& o, const strata::ModelContext& c) {
  const std::optional<double> n = bundled_plugins().estimate_model(name, o, c);
  REQUIRE_MESSAGE(n.has_value(), name << " declares no estimator");
  return *n;
}

/// The estimate equals the parameter count of the model built from the same options and data.
void check_exact(const std::string& name, const Overrides& overrides, const strata::ModelContext& c) {
  const strata::Options o = model_options(name, overrides);
  const double estimated = estimate(name, o, c);
  const auto model = bundled_plugins().create_model(name, o, c);
  CHECK_MESSAGE(estimated == static_cast<double>(model->parameter_count()),
                name << " with " << overrides.size() << " override(s): estimate " << estimated << ", built "
                     << model->parameter_count());
}

/// What `f` throws, as "OptionError <option>: <message>" or "<type>: <message>"; "" when nothing.
/// (The registry passes strata errors through and wraps other exceptions in PluginError.)
template <class F>
std::string thrown(F f) {
  try {
    f();
  } catch (const strata::OptionError& e) {
    return "OptionError " + e.option() + ": " + e.what();
  } catch (const strata::PluginError& e) {
    return "PluginError: "s + e.what();
  } catch (const strata::Error& e) {
    return "Error: "s + e.what();
  } catch (const std::exception& e) {
    return "other: "s + e.what();
  }
  return "";
}

/// Estimating throws exactly what building throws, and something is thrown.
void check_same_error(const std::string& name, const Overrides& overrides, const strata::ModelContext& c,
                      const std::string& expected_start) {
  const strata::Options o = model_options(name, overrides);
  const std::string built = thrown([&] { bundled_plugins().create_model(name, o, c); });
  const std::string estimated = thrown([&] { estimate(name, o, c); });
  CHECK_MESSAGE(built.rfind(expected_start, 0) == 0, name << " threw \"" << built << "\"");
  CHECK(estimated == built);
}

}  // namespace

TEST_CASE("every bundled model declares a parameter estimator") {
  for (const auto& name : {"mlp", "cnn", "vit", "llama"})
    CHECK_MESSAGE(bundled_plugins().at(strata::PluginKind::kModel, name).estimator, name);
}

TEST_CASE("mlp: the estimate is the built parameter count") {
  check_exact("mlp", {}, images(1, 28));
  check_exact("mlp", {}, images(3, 32, 100));
  check_exact("mlp", {{"hidden", Ints{}}}, images(1, 28));
  check_exact("mlp", {{"hidden", Ints{64, 32, 16}}, {"activation", "gelu"s}, {"layer_norm", true}}, images(3, 32));
  check_exact("mlp", {{"hidden", Ints{7}}, {"activation", "tanh"s}, {"layer_norm", true}}, images(1, 4, 2));
}

TEST_CASE("cnn: the estimate is the built parameter count") {
  check_exact("cnn", {}, images(1, 28));
  check_exact("cnn", {}, images(3, 32, 100));
  check_exact("cnn", {{"channels", Ints{8}}, {"hidden", I{0}}, {"groups", I{0}}}, images(1, 28));
  check_exact("cnn", {{"channels", Ints{16, 32, 48}}, {"hidden", I{64}}, {"groups", I{4}}}, images(3, 32));
  check_exact("cnn", {{"channels", Ints{6, 6, 6, 6}}, {"hidden", I{5}}, {"groups", I{6}}}, images(1, 28, 2));
}

TEST_CASE("vit: the estimate is the built parameter count") {
  check_exact("vit", {}, images(3, 32));
  check_exact("vit", {{"patch_size", I{7}}, {"dim", I{48}}, {"depth", I{2}}, {"heads", I{4}}, {"pooling", "mean"s}},
              images(1, 28));
  check_exact("vit", {{"dim", I{40}}, {"heads", I{5}}, {"mlp_ratio", 2.5}, {"depth", I{1}}}, images(3, 32, 100));
  check_exact("vit", {{"patch_size", I{16}}, {"dim", I{32}}, {"depth", I{0}}, {"heads", I{1}}}, images(3, 32, 2));
}

TEST_CASE("llama: the estimate is the built parameter count") {
  check_exact("llama", {}, tokens());
  check_exact("llama", {{"preset", "debug"s}}, tokens());
  check_exact("llama", {{"preset", "debug"s}}, tokens(3));  // sequence classification: a score head
  check_exact("llama", {{"hidden_size", I{64}}, {"num_heads", I{4}}, {"num_layers", I{2}}, {"tie_word_embeddings", true}},
              tokens());
  check_exact("llama",
              {{"hidden_size", I{64}}, {"num_heads", I{4}}, {"num_kv_heads", I{2}}, {"head_dim", I{32}},
               {"intermediate_size", I{100}}, {"num_layers", I{3}}, {"attention_bias", true}, {"vocab_size", I{70}}},
              tokens());

  // Shapes from a Hugging Face config.json: the estimator reads the file (never weights).
  strata::test::TempDir dir;
  dir.write("config.json", R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "tie_word_embeddings": true, "attention_bias": true})");
  check_exact("llama", {{"config_from", dir.path().string()}}, tokens());
  check_exact("llama", {{"config_from", dir.path().string()}}, tokens(2));
}

TEST_CASE("llama: the 1B presets estimate their published parameter counts without building") {
  // Hugging Face's counts for TinyLlama-1.1B (untied lm_head) and Llama-3.2-1B (tied).
  CHECK(estimate("llama", model_options("llama", {{"preset", "tinyllama-1.1b"s}}), tokens()) == 1'100'048'384.0);
  CHECK(estimate("llama", model_options("llama", {{"preset", "llama-3.2-1b"s}}), tokens()) == 1'235'814'400.0);
}

TEST_CASE("an estimate throws what building would, without building") {
  check_same_error("cnn", {{"channels", Ints{32}}, {"groups", I{3}}}, images(1, 28), "OptionError groups:");
  check_same_error("cnn", {{"channels", Ints{4, 4, 4, 4, 4}}, {"groups", I{0}}}, images(1, 28), "OptionError channels:");
  check_same_error("cnn", {}, tokens(2), "OptionError name:");  // wrong kind of data: model.name
  check_same_error("vit", {{"heads", I{5}}}, images(3, 32), "OptionError heads:");
  check_same_error("vit", {{"patch_size", I{5}}}, images(3, 32), "OptionError patch_size:");
  check_same_error("vit", {{"mlp_ratio", 1e-3}}, images(3, 32), "OptionError mlp_ratio:");
  check_same_error("vit", {}, tokens(2), "OptionError name:");  // wrong kind of data: model.name
  check_same_error("llama", {{"num_kv_heads", I{3}}}, tokens(), "OptionError num_kv_heads:");
  check_same_error("llama", {{"vocab_size", I{10}}}, tokens(), "OptionError vocab_size:");
  check_same_error("llama", {}, images(1, 28), "OptionError name:");  // wrong kind of data: model.name
  // Token ids into a linear layer: refused at validation, not by LibTorch at the first step.
  check_same_error("mlp", {}, tokens(), "OptionError name: mlp needs floating-point inputs");
  check_same_error("mlp", {}, tokens(2), "OptionError name: mlp needs floating-point inputs");
}

TEST_CASE("absurd sizes give a large finite estimate at once, without allocating") {
  // Each model below would need exabytes: building it would throw (or take the machine) long
  // before returning, so a finite estimate within a second shows nothing was allocated.
  const auto start = std::chrono::steady_clock::now();
  const auto huge = [](const std::string& name, const Overrides& overrides, const strata::ModelContext& c) {
    const double n = estimate(name, model_options(name, overrides), c);
    CHECK_MESSAGE(std::isfinite(n), name);
    CHECK_MESSAGE(n > 1e18, name << ": " << n);
  };
  huge("mlp", {{"hidden", Ints{kMaxWidth, kMaxWidth}}}, images(1, 28));
  huge("mlp", {{"hidden", Ints(1024, kMaxWidth)}, {"layer_norm", true}}, images(3, 32));
  huge("cnn", {{"channels", Ints{kMaxWidth, kMaxWidth}}, {"hidden", kMaxWidth}, {"groups", I{1}}}, images(3, 32));
  huge("vit", {{"dim", kMaxWidth / 2}, {"depth", I{65536}}, {"heads", I{1}}, {"mlp_ratio", 2.0}}, images(3, 32));
  huge("llama", {{"hidden_size", kMaxWidth}, {"num_heads", I{2}}, {"num_layers", I{65536}}, {"vocab_size", kMaxWidth}},
       tokens());

  // Past the schema's bounds (the host refuses them) the estimator still answers in doubles.
  const auto& spec = *bundled_plugins().at(strata::PluginKind::kModel, "mlp").schema.find("hidden");
  CHECK_FALSE(spec.check(Ints{I{9'000'000'000'000'000'000}}).empty());
  CHECK_FALSE(spec.check(Ints(1025, I{1})).empty());
  strata::Options o = model_options("mlp");
  o.set("hidden", Ints{I{9'000'000'000'000'000'000}});
  const double n = estimate("mlp", o, images(1, 28));
  CHECK(std::isfinite(n));
  CHECK(n == doctest::Approx(9e18 * (784 + 1 + 10)));

  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
}

// ---- llama: RoPE tables and the attention mask once per batch ------------------------------------

#include <ATen/record_function.h>

namespace {
/// ATen ops by name, counted on this thread while an OpCount lives.
thread_local std::map<std::string, int>* counted_ops = nullptr;
std::unique_ptr<at::ObserverContext> count_op(const at::RecordFunction& fn) {
  if (counted_ops != nullptr) ++(*counted_ops)[fn.name()];
  return nullptr;
}
struct OpCount {
  std::map<std::string, int> ops;
  at::CallbackHandle handle;
  OpCount() {
    counted_ops = &ops;
    handle = at::addThreadLocalCallback(at::RecordFunctionCallback(count_op).scopes({at::RecordScope::FUNCTION}));
  }
  ~OpCount() {
    at::removeCallback(handle);
    counted_ops = nullptr;
  }
  int operator[](const std::string& name) const { return ops.count(name) ? ops.at(name) : 0; }
};
}  // namespace

TEST_CASE("llama: every block uses one batch's RoPE tables and mask, computed once, and a new batch gets its own") {
  torch::manual_seed(0);
  const auto o = model_options("llama", {{"hidden_size", I{32}}, {"num_heads", I{4}}, {"num_kv_heads", I{2}},
                                   {"intermediate_size", I{40}}, {"num_layers", I{3}}});
  const auto model = bundled_plugins().create_model("llama", o, tokens(0, 50, 8));
  const auto twin = bundled_plugins().create_model("llama", o, tokens(0, 50, 8));  // the same weights, no batch seen yet
  {
    torch::NoGradGuard no_grad;
    auto to = twin->named_parameters();
    for (const auto& p : model->named_parameters()) to[p.key()].copy_(p.value());
  }
  const auto ids = torch::randint(50, {2, 8}, torch::kInt64);
  strata::Batch padded;
  padded.inputs = ids;
  padded.mask = torch::ones({2, 8}, torch::kBool);
  padded.mask.index_put_({1, torch::indexing::Slice(5)}, false);
  const auto context = strata::BatchContext::of(padded);
  torch::Tensor first;
  {
    OpCount count;
    first = model->forward(ids, context);
    CHECK(count["aten::cos"] == 1);  // not one per block
    CHECK(count["aten::tril"] == 1);
  }
  {
    OpCount count;  // the same batch again (as a checkpointed block's recomputation sees it): nothing recomputed
    CHECK(torch::equal(model->forward(ids, context), first));
    CHECK(count["aten::cos"] == 0);
    CHECK(count["aten::tril"] == 0);
  }
  // Another batch: its own tables and mask, so the outputs are those of a model that never saw the first.
  strata::Batch other = padded;
  other.mask = torch::ones({2, 8}, torch::kBool);
  other.mask.index_put_({0, torch::indexing::Slice(0, 3)}, false);  // left padding: positions start later
  const auto other_context = strata::BatchContext::of(other);
  CHECK(torch::equal(model->forward(ids, other_context), twin->forward(ids, other_context)));
  // The same tensors modified in place are another batch too.
  strata::BatchContext edited = other_context;
  edited.mask.fill_(true);
  edited.positions.copy_(torch::arange(8).expand({2, 8}));
  strata::BatchContext copied;  // the same values in tensors neither model has seen
  copied.mask = edited.mask.clone();
  copied.positions = edited.positions.clone();
  CHECK(torch::equal(model->forward(ids, edited), twin->forward(ids, copied)));
  // Unpadded batches: the tables of a length last across batches.
  {
    OpCount count;
    model->forward(ids, {});
    model->forward(torch::randint(50, {2, 8}, torch::kInt64), {});
    CHECK(count["aten::cos"] <= 1);
  }
}

// ---- llama: lm_head and the cross-entropy fused, a chunk of tokens at a time ----------------------

namespace {
/// The gradients of `model`'s parameters by name (zeros where none arrived).
std::map<std::string, torch::Tensor> grads_of(const strata::Model& model) {
  std::map<std::string, torch::Tensor> g;
  for (const auto& p : model.named_parameters())
    g[p.key()] = p.value().grad().defined() ? p.value().grad().to(torch::kFloat32) : torch::zeros_like(p.value(), torch::kFloat32);
  return g;
}
}  // namespace

TEST_CASE("llama: loss_chunk_tokens gives lm_head-then-cross-entropy's loss and gradients, tensor by tensor") {
  torch::manual_seed(1);
  const Overrides shape{{"hidden_size", I{32}}, {"num_heads", I{4}}, {"num_kv_heads", I{2}}, {"intermediate_size", I{40}},
                        {"num_layers", I{2}}, {"vocab_size", I{50}}};
  Overrides chunked = shape;
  chunked.emplace_back("loss_chunk_tokens", I{5});  // 16 tokens: chunks of 5, 5, 5 and 1
  const auto context = tokens(0, 50, 8);
  strata::Batch batch;
  batch.inputs = torch::randint(50, {2, 8}, torch::kInt64);
  batch.targets = torch::randint(50, {2, 8}, torch::kInt64);
  batch.targets.index_put_({1, torch::indexing::Slice(6)}, strata::kIgnoreIndex);  // skipped tokens
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    CAPTURE(c10::toString(dtype));
    const auto plain = bundled_plugins().create_model("llama", model_options("llama", shape), context);
    const auto fused = bundled_plugins().create_model("llama", model_options("llama", chunked), context);
    {
      torch::NoGradGuard no_grad;
      auto to = fused->named_parameters();
      for (const auto& p : plain->named_parameters()) to[p.key()].copy_(p.value());
    }
    plain->to(dtype);
    fused->to(dtype);
    const auto out = fused->forward(batch.inputs);
    CHECK(out.size(-1) == 32);  // the normalized hidden state: the loss applies lm_head
    const auto reference = plain->loss(plain->forward(batch.inputs).to(torch::kFloat32), batch);
    const auto loss = fused->loss(out.to(torch::kFloat32), batch);
    const double tolerance = dtype == torch::kFloat32 ? 1e-5 : 1e-2;
    CHECK(loss.item<double>() == doctest::Approx(reference.item<double>()).epsilon(tolerance));
    (reference * 0.25).backward();  // as the trainer scales the summed loss
    (loss * 0.25).backward();
    const auto expected = grads_of(*plain), got = grads_of(*fused);
    for (const auto& [name, g] : expected) {
      CAPTURE(name);
      const double error = (got.at(name) - g).norm().item<double>() / std::max(g.norm().item<double>(), 1e-12);
      CHECK(error < tolerance);
    }
    // Without gradients (evaluation), logits as before, and the loss of logits.
    {
      torch::NoGradGuard no_grad;
      const auto logits = fused->forward(batch.inputs);
      CHECK(torch::allclose(logits, plain->forward(batch.inputs)));
      CHECK(logits.size(-1) == 50);
      CHECK(fused->loss(logits.to(torch::kFloat32), batch).item<double>() ==
            doctest::Approx(reference.item<double>()).epsilon(tolerance));
    }
    // Under activation checkpointing every unit's first forward runs with gradients off: the head
    // still leaves lm_head to the loss, as its recomputation in backward does.
    for (const auto& model : {plain, fused}) {
      model->zero_grad();
      model->set_activation_checkpointing(1);
    }
    const auto checkpointed = fused->forward(batch.inputs);
    CHECK(checkpointed.size(-1) == 32);
    (fused->loss(checkpointed.to(torch::kFloat32), batch) * 0.25).backward();
    (plain->loss(plain->forward(batch.inputs).to(torch::kFloat32), batch) * 0.25).backward();
    const auto expected_checkpointed = grads_of(*plain), got_checkpointed = grads_of(*fused);
    for (const auto& [name, g] : expected_checkpointed) {
      CAPTURE(name);
      const double error =
          (got_checkpointed.at(name) - g).norm().item<double>() / std::max(g.norm().item<double>(), 1e-12);
      CHECK(error < tolerance);
    }
  }
  // The memory estimate holds no logits per sample: 2 s V float32 (logits and log-softmax) fewer.
  const auto held = [&](const Overrides& o) {
    return bundled_plugins().estimate_model_memory("llama", model_options("llama", o), context)->activation_bytes_per_sample;
  };
  CHECK(held(shape) - held(chunked) == 2.0 * 8 * 50 * 4);
  // Sequence classification has no lm_head to fuse.
  Overrides classify = chunked;
  classify.emplace_back("task", "sequence_classification"s);
  CHECK_THROWS_AS(bundled_plugins().create_model("llama", model_options("llama", classify), tokens(3, 50, 8)), strata::OptionError);
}

// ---- llama: fused_ops (RMSNorm with its residual add, RoPE in place, SwiGLU) -------------------

namespace {
/// The names of the autograd nodes behind `t`, each once.
std::set<std::string> graph_nodes(const torch::Tensor& t) {
  std::set<std::string> names;
  std::set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack{t.grad_fn().get()};
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    names.insert(node->name());
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  return names;
}
bool has_node(const std::set<std::string>& names, const std::string& part) {
  return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.find(part) != std::string::npos; });
}
}  // namespace

namespace {
/// Model `name` built with `shape` and with `shape` plus fused_ops = true, the same weights, in float32
/// and bfloat16: the same outputs and gradients, parameter by parameter, and the fused model's
/// graph holds the autograd nodes `ops` (the unfused one none of them).
void check_fused_model(const std::string& name, const Overrides& shape, const strata::ModelContext& context,
                       const std::vector<strata::Batch>& batches, const std::vector<std::string>& ops) {
  Overrides fused_options = shape;
  fused_options.emplace_back("fused_ops", true);
  const auto relative = [](const torch::Tensor& got, const torch::Tensor& expected) {
    const auto e = expected.to(torch::kFloat64);
    return (got.to(torch::kFloat64) - e).abs().max().item<double>() / std::max(e.abs().max().item<double>(), 1e-12);
  };
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto& b : batches) {
      CAPTURE(c10::toString(dtype));
      CAPTURE(b.mask.defined());
      const auto plain = bundled_plugins().create_model(name, model_options(name, shape), context);
      const auto fused = bundled_plugins().create_model(name, model_options(name, fused_options), context);
      {
        torch::NoGradGuard no_grad;
        auto to = fused->named_parameters();
        for (const auto& p : plain->named_parameters()) to[p.key()].copy_(p.value());
      }
      plain->to(dtype);
      fused->to(dtype);
      const auto ctx = strata::BatchContext::of(b);
      const auto inputs = b.inputs.is_floating_point() ? b.inputs.to(dtype) : b.inputs;  // images as the weights
      const auto reference = plain->forward(inputs, ctx), out = fused->forward(inputs, ctx);
      const double tolerance = dtype == torch::kFloat32 ? 2e-5 : 3e-2;
      CHECK(relative(out, reference) < tolerance);
      const auto fused_nodes = graph_nodes(out), plain_nodes = graph_nodes(reference);
      for (const auto& op : ops) {
        CAPTURE(op);
        CHECK(has_node(fused_nodes, op));
        CHECK_FALSE(has_node(plain_nodes, op));
      }
      plain->loss(reference.to(torch::kFloat32), b).backward();
      fused->loss(out.to(torch::kFloat32), b).backward();
      const auto expected = grads_of(*plain), got = grads_of(*fused);
      for (const auto& [param, g] : expected) {
        CAPTURE(param);
        CHECK(relative(got.at(param), g) < tolerance);
      }
    }
  }
}
}  // namespace

TEST_CASE("llama: fused_ops gives the unfused model's logits and gradients, parameter by parameter") {
  torch::manual_seed(2);
  strata::Batch batch;
  batch.inputs = torch::randint(50, {3, 8}, torch::kInt64);
  batch.targets = torch::randint(50, {3, 8}, torch::kInt64);
  strata::Batch padded = batch;  // per-sample positions: RoPE tables of one row per sample
  padded.mask = torch::ones({3, 8}, torch::kBool);
  padded.mask.index_put_({1, torch::indexing::Slice(0, 3)}, false);
  check_fused_model("llama",
                    {{"hidden_size", I{32}}, {"num_heads", I{4}}, {"num_kv_heads", I{2}}, {"intermediate_size", I{40}},
                     {"num_layers", I{2}}, {"vocab_size", I{50}}, {"attention_bias", true}},
                    tokens(0, 50, 8), {batch, padded},
                    {"AddRmsNormFunction", "RmsNormFunction", "RopeFunction", "SwiGluFunction"});
}

TEST_CASE("vit: fused_ops gives the unfused model's logits and gradients, parameter by parameter") {
  torch::manual_seed(9);
  strata::Batch batch;
  batch.inputs = torch::randn({3, 3, 8, 8});
  batch.targets = torch::randint(10, {3}, torch::kInt64);
  check_fused_model("vit", {{"dim", I{24}}, {"heads", I{2}}, {"depth", I{2}}, {"patch_size", I{4}}}, images(3, 8),
                    {batch}, {"AddLayerNormFunction"});
}
