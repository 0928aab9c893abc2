// The sweep file of `strata compare`: its structure, the cross product, and how a strategy's
// placement maps the world_size axis.
#include "test_support.hpp"

#include "sweep/sweep.hpp"
#include "strata/registry.hpp"

namespace {

struct NoSweepOptions {};
struct Replicas {
  std::int64_t replicas = 2;
};

strata::Registry sweep_registry() {
  strata::Registry r;
  const auto none = [](const auto&) { return std::shared_ptr<strata::Strategy>(); };
  r.add_strategy("single", "one device", strata::Schema<NoSweepOptions>{}, none, strata::Placement::one_device());
  r.add_strategy("ddp", "rank per device", strata::Schema<NoSweepOptions>{}, none);
  strata::Schema<Replicas> replicas;
  replicas.option("replicas", &Replicas::replicas, "devices");
  r.add_strategy("dp", "devices in one process", replicas, none, strata::Placement::devices_in_process("replicas"));
  return r;
}

/// The ConfigError of parsing `text`, as "line:column key message".
std::string parse_error(const std::string& text) {
  strata::test::TempDir dir;
  dir.write("base.toml", "");
  const auto file = dir.write("sweep.toml", text);
  try {
    strata::parse_sweep(file);
  } catch (const strata::ConfigError& e) {
    return std::to_string(e.where().line) + ":" + std::to_string(e.where().column) + " " + e.key() + " " + e.what();
  }
  return "no error";
}

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

}  // namespace

TEST_CASE("a sweep expands to one run per applicable combination, world size mapped by placement") {
  strata::test::TempDir dir;
  dir.write("base.toml", "");
  const auto file = dir.write("sweep.toml", R"(
[compare]
base = "base.toml"
[compare.axes]
strategy = ["single", "ddp", "dp"]
world_size = [1, 2]
optimizer.lr = [0.1, 0.01]
[compare.set]
"train.steps" = 5
)");
  const auto sweep = strata::parse_sweep(file, {"log.every=1"});
  REQUIRE(sweep.axes.size() == 3);
  CHECK(sweep.axes[2].key == "optimizer.lr");  // unquoted dotted keys too, in file order
  CHECK(sweep.baseline == std::vector<std::pair<std::string, std::string>>{{"strategy", "single"}, {"world_size", "1"}});
  const auto plan = strata::plan_sweep(sweep, sweep_registry(), "single", 1, 32);
  // single runs at world size 1 only: 2 lr values; ddp and dp: 2 x 2 each; 3 repeats by default.
  REQUIRE(plan.combinations.size() == 10);
  CHECK(plan.runs.size() == 30);
  CHECK(plan.runs[1].label == "single-w1-lr0.1-r2");
  CHECK(plan.skipped.size() == 2);
  const auto& first = plan.combinations[0];
  CHECK(first.label == "single-w1-lr0.1");
  CHECK(first.overrides == std::vector<std::string>{"train.steps=5", "log.every=1", "strategy.name=\"single\"",
                                                    "optimizer.lr=0.1", "distributed.nproc=1"});
  CHECK(first.origins[0].line == 9);   // "train.steps" of [compare.set]
  CHECK(first.origins[1].file == "--set log.every=1");
  CHECK(first.origins[3].line == 7);   // the lr value
  const auto find = [&](const std::string& label) {
    for (const auto& r : plan.combinations)
      if (r.label == label) return r;
    FAIL("no run " << label);
    return strata::SweepRun{};
  };
  CHECK(has(find("ddp-w2-lr0.01").overrides, "distributed.nproc=2"));
  const auto dp = find("dp-w2-lr0.1");
  CHECK(has(dp.overrides, "distributed.nproc=1"));
  CHECK(has(dp.overrides, "strategy.replicas=2"));
  CHECK(dp.world_size == 2);
}

TEST_CASE("weak scaling scales the global batch from the baseline world size, repeats multiply runs") {
  strata::test::TempDir dir;
  dir.write("base.toml", "");
  const auto file = dir.write("sweep.toml", R"([compare]
base = "base.toml"
scaling = "weak"
repeats = 2
baseline = { strategy = "ddp", world_size = 2 }
[compare.axes]
strategy = ["ddp"]
world_size = [2, 4]
)");
  const auto plan = strata::plan_sweep(strata::parse_sweep(file), sweep_registry(), "single", 1, 16);
  REQUIRE(plan.runs.size() == 4);
  CHECK(plan.runs[0].label == "ddp-w2-r1");
  CHECK(plan.runs[1].label == "ddp-w2-r2");
  CHECK(has(plan.runs[0].overrides, "train.global_batch_size=16"));
  CHECK(has(plan.runs[3].overrides, "train.global_batch_size=32"));
  CHECK(plan.baseline_world_size == 2);
}

TEST_CASE("sweep errors name the line and column of the offending key or value") {
  CHECK(parse_error("[compare]\nbase = \"base.toml\"\nrepaets = 2\n").rfind("3:1 compare.repaets", 0) == 0);
  CHECK(parse_error("[compare]\n").rfind("1:1 compare.base", 0) == 0);
  CHECK(parse_error("[compare]\nbase = \"base.toml\"\n[compare.axes]\nworld_size = [2, 2]\n")
            .rfind("4:18 compare.axes.world_size value 2 appears twice", 0) == 0);
  CHECK(parse_error("[compare]\nbase = \"base.toml\"\n[compare.axes]\nlr = [0.1]\n").rfind("4:6 compare.axes.lr", 0) == 0);
  CHECK(parse_error("[compare]\nbase = \"base.toml\"\n[compare.axes]\nstrategy = []\n").find("non-empty") != std::string::npos);
  CHECK(parse_error("[compare]\nbase = \"base.toml\"\nbaseline = { world_size = 3 }\n[compare.axes]\nworld_size = [1, 2]\n")
            .rfind("3:27 compare.baseline.world_size", 0) == 0);
  CHECK(parse_error("[compare]\nbase = \"base.toml\"\n[compare.axes]\n\"train.steps\" = [1]\n[compare.set]\n\"train.steps\" = 2\n")
            .find("both an axis and a fixed setting") != std::string::npos);
}

TEST_CASE("a baseline that does not apply is an error at the baseline") {
  strata::test::TempDir dir;
  dir.write("base.toml", "");
  const auto file = dir.write("sweep.toml", R"([compare]
base = "base.toml"
baseline = { strategy = "single", world_size = 2 }
[compare.axes]
strategy = ["single", "ddp"]
world_size = [1, 2]
)");
  try {
    strata::plan_sweep(strata::parse_sweep(file), sweep_registry(), "single", 1, 32);
    FAIL("no error");
  } catch (const strata::ConfigError& e) {
    CHECK(e.where().line == 3);
    CHECK(std::string(e.what()).find("single-w2") != std::string::npos);
  }
}

TEST_CASE("--set compare.KEY changes the sweep (an axis in its place, a new one last), other keys every run") {
  strata::test::TempDir dir;
  dir.write("base.toml", "");
  const auto file = dir.write("sweep.toml", R"([compare]
base = "base.toml"
[compare.axes]
strategy = ["single", "ddp"]
"optimizer.lr" = [0.1]
world_size = [1, 2]
[compare.set]
"train.steps" = 5
)");
  const auto sweep = strata::parse_sweep(
      file, {"compare.axes.optimizer.lr=[0.5, 0.25]", "compare.axes.\"train.seed\"=[1, 2]", "compare.repeats=3",
             "compare.scaling=weak", "train.steps=7", "log.every=2"});
  REQUIRE(sweep.axes.size() == 4);
  CHECK(sweep.axes[1].key == "optimizer.lr");  // replaced where it was
  CHECK(sweep.axes[1].values.size() == 2);
  CHECK(sweep.axes[1].values[1].where.file == "--set compare.axes.optimizer.lr=[0.5, 0.25]");
  CHECK(sweep.axes[3].key == "train.seed");  // new: last
  CHECK(sweep.repeats == 3);
  CHECK(sweep.scaling == "weak");
  CHECK(sweep.scaling_at.file == "--set compare.scaling=weak");
  REQUIRE(sweep.set.size() == 2);
  CHECK(sweep.set[0].key == "train.steps");  // the command line's value replaces [compare.set]'s
  CHECK(sweep.set[0].toml == "7");
  CHECK(sweep.set[0].where.file == "--set train.steps=7");
  CHECK(sweep.set[1].key == "log.every");
  // Errors name the override.
  const auto error = [&](const std::string& override) {
    try {
      strata::parse_sweep(file, {override});
    } catch (const strata::ConfigError& e) {
      return e.where().str() + " " + e.key() + " " + e.what();
    }
    return std::string("no error");
  };
  CHECK(error("compare.axes.world_size=[0]").rfind("--set compare.axes.world_size=[0] compare.axes.world_size", 0) == 0);
  CHECK(error("compare.repaets=2").find("Did you mean 'repeats'") != std::string::npos);
  CHECK(error("compare.axes.train.steps=[1, 2]").find("both an axis and a fixed setting") != std::string::npos);
  CHECK(error("distributed.nproc=2").find("the axis 'world_size'") != std::string::npos);
}
