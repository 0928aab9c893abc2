// Options schemas: binding a struct, defaults, constraint checks and TOML rendering.
#include "test_support.hpp"

#include "strata/options.hpp"

namespace {
struct Opts {
  std::int64_t width = 8;
  double rate = 0.5;
  std::string mode = "fast";
  bool flag = false;
  std::vector<std::int64_t> dims = {1, 2};
  std::vector<std::string> names = {"a"};
};

strata::Schema<Opts> make_schema() {
  strata::Schema<Opts> s;
  s.option("width", &Opts::width, "width", strata::at_least(1))
      .option("rate", &Opts::rate, "rate", strata::positive())
      .option("mode", &Opts::mode, "mode", strata::one_of({"fast", "slow"}))
      .option("flag", &Opts::flag, "flag")
      .option("dims", &Opts::dims, "dims", strata::between(1, 4))
      .option("names", &Opts::names, "names");
  return s;
}
}  // namespace

TEST_CASE("a schema takes its defaults from the default-constructed struct") {
  auto schema = make_schema();
  const auto& specs = schema.erased().specs;
  REQUIRE(specs.size() == 6);
  CHECK(std::get<std::int64_t>(specs[0].default_value) == 8);
  CHECK(specs[0].type == strata::OptionType::kInt);
  CHECK(specs[4].type == strata::OptionType::kIntList);
  CHECK(std::get<std::string>(schema.erased().find("mode")->default_value) == "fast");
  CHECK(schema.erased().find("nope") == nullptr);
}

TEST_CASE("bind fills the struct and dump reads it back") {
  auto schema = make_schema();
  strata::Options values;
  values.set("width", std::int64_t{32});
  values.set("mode", std::string("slow"));
  values.set("dims", std::vector<std::int64_t>{3, 4});
  Opts o = schema.bind(values);
  CHECK(o.width == 32);
  CHECK(o.mode == "slow");
  CHECK(o.dims == std::vector<std::int64_t>{3, 4});
  CHECK(o.rate == 0.5);  // absent: default kept
  auto dumped = schema.dump(o);
  CHECK(dumped.get<std::int64_t>("width") == 32);
  CHECK(dumped.get<double>("rate") == 0.5);
}

TEST_CASE("constraints name the bound and echo the bad value") {
  auto schema = make_schema();
  const auto& width = *schema.erased().find("width");
  CHECK(width.check(std::int64_t{1}).empty());
  CHECK(width.check(std::int64_t{0}) == "must be >= 1, got 0");
  const auto& rate = *schema.erased().find("rate");
  CHECK(rate.check(0.0) == "must be > 0, got 0");
  CHECK(rate.check(1e-9).empty());
  const auto& mode = *schema.erased().find("mode");
  CHECK(mode.check(std::string("slwo")).find("Did you mean 'slow'?") != std::string::npos);
  const auto& dims = *schema.erased().find("dims");
  CHECK(dims.check(std::vector<std::int64_t>{1, 5}).find("each element must be >= 1 and <= 4, got 5") == 0);
  CHECK(mode.constraint_text() == "one of: fast, slow");
}

TEST_CASE("values render as TOML") {
  CHECK(strata::to_toml(std::int64_t{3}) == "3");
  CHECK(strata::to_toml(0.001) == "0.001");
  CHECK(strata::to_toml(2.0) == "2.0");
  CHECK(strata::to_toml(true) == "true");
  CHECK(strata::to_toml(std::string("a\"b")) == "\"a\\\"b\"");
  CHECK(strata::to_toml(std::vector<double>{0.9, 0.999}) == "[0.9, 0.999]");
  CHECK(strata::to_toml(std::vector<std::string>{}) == "[]");
}
