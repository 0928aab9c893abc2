#include "test_support.hpp"
// validate's fit check (estimate/fit.hpp) on the TinyLlama-1.1B shape of
// experiments/tinyllama_mrpc.toml (hidden 2048, 22 layers, 32 heads, 4 KV heads, intermediate
// 5632, vocabulary 32000; sequence classification of 2 classes at seq_len 128, global batch 32,
// bfloat16 parameters, AdamW), from the llama plugin's own estimates, against figures computed by
// hand. And each bundled model's memory estimate against the model it builds.

#include <cmath>
#include <string>

#include "bundled_plugins.hpp"
#include "estimate/fit.hpp"
#include "estimate/fit_experiment.hpp"
#include "strata/model.hpp"
#include "strata/registry.hpp"

namespace es = strata::estimate;

namespace {

using strata::test::kGiB;

using strata::test::bundled_plugins;

strata::ModelContext mrpc_tokens(std::int64_t seq_len) {
  strata::ModelContext c;
  c.data.input_shape = {seq_len};
  c.data.input_dtype = torch::kInt64;
  c.data.vocab_size = 32000;
  c.data.seq_len = seq_len;
  c.data.num_classes = 2;
  return c;
}

/// The request run.cpp makes for the preset: the plugin's estimates, activations halved for
/// bfloat16 (the plugin counts float32 ones).
es::FitRequest tinyllama(const std::string& strategy, int world, double device_gib, std::int64_t seq_len = 128) {
  const auto& schema = bundled_plugins().at(strata::PluginKind::kModel, "llama").schema;
  strata::Options o = schema.defaults();
  o.set("preset", std::string("tinyllama-1.1b"));
  const auto context = mrpc_tokens(seq_len);
  const auto parameters = bundled_plugins().estimate_model("llama", o, context);
  const auto memory = bundled_plugins().estimate_model_memory("llama", o, context);
  REQUIRE(parameters.has_value());
  REQUIRE(memory.has_value());
  es::FitRequest r;
  r.strategy = strategy;
  r.world_size = world;
  // Every strategy with its defaults, read from its plugin's plan, every rank on one host.
  r.model = [](const std::string& s) { return es::strategy_model(bundled_plugins(), s, {}); };
  r.candidates = es::fit_candidates(bundled_plugins(), world);
  r.parameters = *parameters;
  r.unit_parameters = memory->unit_parameters;
  r.activation_bytes_per_sample = memory->activation_bytes_per_sample * 0.5;
  r.global_batch = 32;
  r.micro_batches = 1;
  r.optimizer = "adamw";
  r.param_dtype = "bfloat16";
  r.reduce_dtype = "float32";
  r.device_memory = device_gib * kGiB;
  r.device_memory_source = "a test device";
  return r;
}

// Psi = embed 32000 x 2048 = 65,536,000 + 22 blocks x 44,044,288 (2 x 2048 norms + 2 x 2048^2 q, o
// + 2 x 2048 x 256 k, v + 3 x 2048 x 5632 MLP) = 968,974,336 + head 2048 (norm) + 2 x 2048 (score)
// = 1,034,516,480.
constexpr double kPsi = 1034516480.0;
// Activations per example (Korthikanti et al.), float32: 22 x 2 x s h (34 + 5 a s / h) + s h x 4.
// s = 128: s h = 262,144, 34 + 5 x 32 x 128 / 2048 = 44: 22 x 2 x 262,144 x 44 + 1,048,576
// = 508,559,360 bytes; bfloat16 halves it: 254,279,680.
constexpr double kAct128 = 254279680.0;

}  // namespace

TEST_CASE("fit check: the TinyLlama shape's parameters and activations by the llama plugin's estimate") {
  const auto r = tinyllama("ddp", 4, 80);
  CHECK(r.parameters == kPsi);
  REQUIRE(r.unit_parameters.size() == 24);  // embed, 22 blocks, head
  CHECK(r.unit_parameters.front() == 65536000.0);
  CHECK(r.unit_parameters[1] == 44044288.0);
  CHECK(r.unit_parameters.back() == 6144.0);
  CHECK(r.activation_bytes_per_sample == kAct128);
}

TEST_CASE("fit check: TinyLlama zero3 at 8 ranks fits an 80 GiB device, about 3.48 GiB per rank") {
  const auto r = tinyllama("zero3", 8, 80);
  const auto c = es::check_fit(r);
  // Owned: Psi / 8 = 129,314,560 (every unit divides by 8: no padding). Per rank: bfloat16
  // parameters 2 + float32 masters 4 = 6 bytes (775,887,360), gradients 4 (517,258,240), AdamW 8
  // (1,034,516,480): state 2,327,662,080. Activations of 32 / 8 = 4 examples: 1,017,118,720.
  // Gathered in backward: block0 gathered with its gradients (44,044,288 x 6) and the embedding
  // prefetched (65,536,000 x 2): 395,337,728. Peak: 2,327,662,080 + 1,017,118,720 + 395,337,728
  // = 3,740,118,528 bytes = 3.483 GiB.
  CHECK(c.fits);
  CHECK(c.estimate.memory.params == doctest::Approx(775887360.0));
  CHECK(c.estimate.memory.grads == doctest::Approx(517258240.0));
  CHECK(c.estimate.memory.optimizer == doctest::Approx(1034516480.0));
  CHECK(c.estimate.memory.activations == doctest::Approx(4 * kAct128));
  CHECK(c.estimate.memory.gathered == doctest::Approx(395337728.0));
  CHECK(c.peak == doctest::Approx(3740118528.0));
  const std::string line = es::fit_line(r, c);
  CHECK(line.find("about 3.48 GiB for zero3 at world size 8") != std::string::npos);
  CHECK(line.find("of the 80 GiB of a test device") != std::string::npos);
}

TEST_CASE("fit check: TinyLlama ddp at 4 ranks needs about 21.2 GiB per rank at seq_len 128") {
  // Replicated: 6 + 4 + 8 = 18 bytes x Psi = 18,621,296,640 of state; activations of 8 examples
  // 2,034,237,440 are outweighed by the optimizer step's float32 temporaries, 4 Psi =
  // 4,138,065,920. Peak 22,759,362,560 bytes = 21.20 GiB: an 80 GiB device holds it (the issue's
  // "about 66 GiB" does not follow at this sequence length and batch), a 16 GiB one does not.
  const auto fits = es::check_fit(tinyllama("ddp", 4, 80));
  CHECK(fits.fits);
  CHECK(fits.peak == doctest::Approx(22759362560.0));
  CHECK(fits.estimate.memory.activations == doctest::Approx(8 * kAct128));

  const auto r = tinyllama("ddp", 4, 16);
  const auto c = es::check_fit(r);
  CHECK_FALSE(c.fits);
  // zero3 at 4: state 18 Psi / 4 = 4,655,324,160 + activations 2,034,237,440 + gathered
  // 395,337,728 = 7,084,899,328 = 6.60 GiB.
  bool zero3 = false;
  for (const auto& w : c.would_fit) zero3 = zero3 || w == "zero3 at 4 ranks (6.6 GiB per rank)";
  CHECK_MESSAGE(zero3, "would fit: " << es::fit_fix(r, c));
  const std::string why = es::fit_refusal(r, c);
  CHECK(why.find("strategy 'ddp' at world size 4 needs about 21.2 GiB per rank") != std::string::npos);
  CHECK(why.find("parameters 5.78 GiB + gradients 3.85 GiB + optimizer 7.71 GiB + activations 1.89 GiB") != std::string::npos);
  CHECK(why.find("more than the 16 GiB of a test device") != std::string::npos);
}

TEST_CASE("fit check: at TinyLlama's 2048-token context ddp at 4 ranks is refused on 80 GiB, zero3 at 8 fits") {
  // s = 2048: s h = 4,194,304, 34 + 5 x 32 = 194: 22 x 2 x 4,194,304 x 194 + 16,777,216 =
  // 35,819,356,160 float32 bytes per example, 17,909,678,080 in bfloat16.
  constexpr double kAct2048 = 17909678080.0;
  const auto r = tinyllama("ddp", 4, 80, 2048);
  CHECK(r.activation_bytes_per_sample == kAct2048);
  const auto c = es::check_fit(r);
  // ddp at 4: 18 Psi + 8 examples = 18,621,296,640 + 143,277,424,640 = 161,898,721,280 (150.8 GiB).
  CHECK_FALSE(c.fits);
  CHECK(c.peak == doctest::Approx(161898721280.0));
  // Nothing at 4 ranks holds 8 examples' 133 GiB; ddp at 8: 18 Psi + 4 examples = 84.06 GiB, no;
  // at 16: 18 Psi + 2 examples = 54,440,652,800 = 50.7 GiB.
  REQUIRE(c.would_fit.size() == 1);
  CHECK(c.would_fit.front() == "ddp at 16 ranks (50.7 GiB per rank)");
  CHECK(es::fit_fix(r, c).find("These would fit: ddp at 16 ranks") == 0);
  // zero3 at 8: 2,327,662,080 + 4 examples 71,638,712,320 + 395,337,728 = 74,361,712,128 (69.25 GiB).
  const auto z = es::check_fit(tinyllama("zero3", 8, 80, 2048));
  CHECK(z.fits);
  CHECK(z.peak == doctest::Approx(74361712128.0));
}

TEST_CASE("fit check: every bundled model's memory estimate has the units of the model it builds") {
  struct Case {
    std::string name;
    strata::ModelContext context;
  };
  strata::ModelContext images;
  images.data.input_shape = {3, 32, 32};
  images.data.num_classes = 10;
  strata::ModelContext text;
  text.data.input_shape = {16};
  text.data.input_dtype = torch::kInt64;
  text.data.vocab_size = 50;
  text.data.seq_len = 16;
  for (const Case& k : {Case{"mlp", images}, Case{"cnn", images}, Case{"vit", images}, Case{"llama", text}}) {
    const auto o = bundled_plugins().at(strata::PluginKind::kModel, k.name).schema.defaults();
    const auto m = bundled_plugins().estimate_model_memory(k.name, o, k.context);
    REQUIRE_MESSAGE(m.has_value(), k.name);
    const auto model = bundled_plugins().create_model(k.name, o, k.context);
    REQUIRE_MESSAGE(m->unit_parameters.size() == model->units().size(), k.name);
    for (std::size_t u = 0; u < model->units().size(); ++u) {
      double params = 0;
      for (const auto& t : model->units()[u]->parameters()) params += static_cast<double>(t.numel());
      CHECK_MESSAGE(m->unit_parameters[u] == params, k.name << " unit " << u);
    }
    CHECK_MESSAGE(m->activation_bytes_per_sample > 0, k.name);
  }
}

TEST_CASE("fit check: optimizer offload is suggested where only it fits, and counts host memory apart") {
  // zero3 at 1 rank, 4 examples of 128 tokens: 18 Psi of state (bfloat16 parameters 2 + float32
  // masters 4 + gradients 4 + AdamW 8) and the step's 4 Psi of temporaries, 21.2 GiB, refused on
  // 16 GiB. With offload the device keeps 10 Psi (9.63 GiB), activations and a gathered unit:
  // 10.8 GiB; the host the AdamW state (8 Psi) and float32 copies of the masters and their
  // gradients (8 Psi): 15.4 GiB.
  auto r = tinyllama("zero3", 1, 16);
  r.global_batch = 4;
  r.host_memory = 64 * kGiB;
  strata::Options offload;
  offload.set("offload", std::string("optimizer"));
  r.offloaded = [offload] { return es::strategy_model(bundled_plugins(), "zero3", offload); };
  const auto c = es::check_fit(r);
  CHECK_FALSE(c.fits);
  CHECK(c.estimate.memory.host == 0);
  bool suggested = false;
  for (const auto& w : c.would_fit)
    suggested = suggested || w.find("zero3 with strategy.offload = \"optimizer\" (10.8 GiB per rank on the device, "
                                    "15.4 GiB of host memory)") == 0;
  CHECK_MESSAGE(suggested, "would fit: " << es::fit_fix(r, c));

  // The same request with offload on: it fits the device; the host's share is checked apart.
  auto on = r;
  on.model = [offload](const std::string&) { return es::strategy_model(bundled_plugins(), "zero3", offload); };
  on.offloaded = nullptr;
  const auto fits = es::check_fit(on);
  CHECK(fits.fits);
  CHECK(fits.estimate.memory.optimizer == 0);
  CHECK(fits.estimate.memory.host == doctest::Approx(16 * kPsi));
  CHECK(fits.estimate.memory.transient_step == 0);
  CHECK(fits.peak == doctest::Approx(10 * kPsi + 4 * kAct128 + fits.estimate.memory.gathered));
  CHECK(es::fit_line(on, fits).find("host memory 15.4 GiB (offloaded)") != std::string::npos);
  on.host_memory = 8 * kGiB;
  const auto short_host = es::check_fit(on);
  CHECK_FALSE(short_host.fits);
  CHECK(es::fit_refusal(on, short_host).find("needs 15.4 GiB of host memory per rank, more than the 8 GiB") !=
        std::string::npos);
}
