// Experiment files: every error names file:line:column and the key; overrides go through the
// same validation; plugin sections are validated against the plugin's own schema.
#include "test_support.hpp"

#include "config/experiment.hpp"
#include "strata/model.hpp"
#include "strata/strategy.hpp"

using strata::test::TempDir;

namespace {

const char* kGood = R"([experiment]
name = "t"

[model]
name = "toy"
width = 4

[dataset]
name = "toyset"

[strategy]
name = "single"

[train]
steps = 5
global_batch_size = 8
)";

struct ToyOptions {
  std::int64_t width = 2;
  std::string act = "relu";
};

strata::Registry toy_registry() {
  strata::Registry r;
  strata::Schema<ToyOptions> schema;
  schema.option("width", &ToyOptions::width, "width", strata::at_least(1))
      .option("act", &ToyOptions::act, "activation", strata::one_of({"relu", "tanh"}));
  r.add_model("toy", "toy model", schema, [](const ToyOptions&, const strata::ModelContext&) {
    return std::shared_ptr<strata::Model>();
  });
  r.add_dataset("toyset", "toy data", strata::Schema<ToyOptions>{}, [](const ToyOptions&, const strata::DatasetContext&) {
    return std::shared_ptr<strata::Dataset>();
  });
  r.add_strategy("single", "baseline", strata::Schema<ToyOptions>{},
                 [](const ToyOptions&) { return std::shared_ptr<strata::Strategy>(); });
  return r;
}

/// Loads `text` (plus overrides) and returns the ConfigError it raises.
strata::ConfigError config_error(const std::string& text, const std::vector<std::string>& overrides = {},
                             bool plugins = false) {
  TempDir dir;
  auto file = dir.write("exp.toml", text);
  try {
    auto e = strata::load_experiment(file, overrides);
    if (plugins) {
      auto r = toy_registry();
      strata::validate_plugin_sections(e, r);
    }
  } catch (const strata::ConfigError& err) {
    return err;
  }
  FAIL("no ConfigError for:\n" << text);
  throw std::logic_error("unreachable");
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  return text.replace(pos, from.size(), to);
}

}  // namespace

TEST_CASE("a good file loads with defaults filled in") {
  TempDir dir;
  auto e = strata::load_experiment(dir.write("exp.toml", kGood));
  CHECK(e.experiment.name == "t");
  CHECK(e.train.steps == 5);
  CHECK(e.train.micro_batches == 1);
  CHECK(e.optimizer.name == "adamw");
  CHECK(e.model.name == "toy");
  auto r = toy_registry();
  strata::validate_plugin_sections(e, r);
  CHECK(e.model.options.get<std::int64_t>("width") == 4);
  CHECK(e.model.options.get<std::string>("act") == "relu");
  auto text = strata::resolved_toml(e);
  CHECK(text.find("[train]\n") != std::string::npos);
  CHECK(text.find("steps = 5\n") != std::string::npos);
  CHECK(text.find("width = 4\n") != std::string::npos);
  // The resolved file is itself a valid experiment with the same values.
  auto again = strata::load_experiment(dir.write("resolved.toml", text));
  CHECK(again.train.global_batch_size == 8);
}

TEST_CASE("syntax errors and duplicate keys point at their line and column") {
  auto err = config_error(replace(kGood, "steps = 5", "steps = = 5"));
  CHECK(err.where().line == 15);
  CHECK(err.where().column > 1);
  auto dup = config_error(replace(kGood, "steps = 5", "steps = 5\nsteps = 6"));
  CHECK(dup.where().line == 16);
  CHECK(err.exit_code() == 2);
}

TEST_CASE("unknown sections and keys suggest the nearest name") {
  auto section = config_error(replace(kGood, "[train]", "[trian]"));
  CHECK(section.where().line == 14);
  CHECK(std::string(section.what()).find("Did you mean 'train'?") != std::string::npos);
  auto key = config_error(replace(kGood, "steps = 5", "stpes = 5"));
  CHECK(key.where().line == 15);
  CHECK(key.where().column == 1);
  CHECK(key.key() == "train.stpes");
  CHECK(std::string(key.what()).find("Did you mean 'steps'?") != std::string::npos);
}

TEST_CASE("wrong types and out-of-range values name the key and echo the value") {
  auto type = config_error(replace(kGood, "steps = 5", "steps = \"five\""));
  CHECK(type.where().line == 15);
  CHECK(type.where().column == 9);
  CHECK(type.key() == "train.steps");
  CHECK(std::string(type.what()) == "expected an integer, got string \"five\".");
  auto range = config_error(replace(kGood, "steps = 5", "steps = -1"));
  CHECK(std::string(range.what()).rfind("steps must be >= 0", 0) == 0);
  auto choice = config_error(std::string(kGood) + "lr_schedule = \"cosin\"\n");
  CHECK(choice.where().line == 17);
  CHECK(std::string(choice.what()).find("Did you mean 'cosine'?") != std::string::npos);
  auto lr = config_error(std::string(kGood) + "\n[optimizer]\nlr = -1\n");
  CHECK(lr.key() == "optimizer.lr");
  CHECK(lr.where().line == 19);
}

TEST_CASE("cross-field checks point at the offending key") {
  auto micro = config_error(std::string(kGood) + "micro_batches = 3\n");
  CHECK(micro.key() == "train.micro_batches");
  CHECK(micro.where().line == 17);
  CHECK(std::string(micro.what()).find("not divisible") != std::string::npos);
}

TEST_CASE("more warmup steps than steps are accepted and kept as written (the trainer clamps them)") {
  TempDir dir;
  const auto file = dir.write("exp.toml", std::string(kGood) + "warmup_steps = 50\n");
  const auto e = strata::load_experiment(file, {"train.steps=20"});
  CHECK(e.train.steps == 20);
  CHECK(e.train.warmup_steps == 50);  // a resume of this run with more steps compares equal
  CHECK(strata::resolved_toml(e).find("warmup_steps = 50") != std::string::npos);
  CHECK(strata::load_experiment(file, {"train.steps=80"}).train.warmup_steps == 50);
  CHECK(strata::load_experiment(file, {"train.steps=0"}).train.warmup_steps == 50);  // nothing to train
}

TEST_CASE("a missing plugin section or name is an error at the file") {
  auto missing = config_error(replace(kGood, "[model]\nname = \"toy\"\nwidth = 4\n", ""));
  CHECK(missing.key() == "model");
  CHECK(missing.where().line >= 1);
  auto bad_name = config_error(replace(kGood, "name = \"toy\"", "name = 3"));
  CHECK(bad_name.key() == "model.name");
  CHECK(bad_name.where().line == 5);
}

TEST_CASE("plugin sections are validated against the plugin's schema") {
  auto unknown = config_error(replace(kGood, "name = \"single\"", "name = \"singel\""), {}, true);
  CHECK(unknown.key() == "strategy.name");
  CHECK(unknown.where().line == 12);
  CHECK(std::string(unknown.what()).find("available: single") != std::string::npos);
  CHECK(std::string(unknown.what()).find("Did you mean 'single'?") != std::string::npos);
  auto option = config_error(replace(kGood, "width = 4", "widht = 4"), {}, true);
  CHECK(option.key() == "model.widht");
  CHECK(option.where().line == 6);
  CHECK(std::string(option.fix()).find("strata describe toy") != std::string::npos);
  auto value = config_error(replace(kGood, "width = 4", "width = 0"), {}, true);
  CHECK(value.key() == "model.width");
  CHECK(value.where().column == 9);
}

TEST_CASE("--set overrides are validated and located as overrides") {
  TempDir dir;
  auto file = dir.write("exp.toml", kGood);
  auto e = strata::load_experiment(file, {"train.steps=50", "optimizer.name=sgd", "eval.every=0"});
  CHECK(e.train.steps == 50);
  CHECK(e.optimizer.name == "sgd");
  CHECK(e.eval.every == 0);
  auto bad = config_error(kGood, {"train.steps=abc"});
  CHECK(bad.where().str() == "--set train.steps=abc");
  CHECK(bad.key() == "train.steps");
  auto typo = config_error(kGood, {"train.stpes=5"});
  CHECK(std::string(typo.what()).find("Did you mean 'steps'?") != std::string::npos);
  auto shape = config_error(kGood, {"steps"});
  CHECK(shape.where().str() == "--set steps");
}

TEST_CASE("a missing file is a configuration error") {
  CHECK_THROWS_AS(strata::load_experiment("/nonexistent/exp.toml"), strata::ConfigError);
}
