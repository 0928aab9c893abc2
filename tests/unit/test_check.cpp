// The pure pieces of `strata check`: --world-sizes parsing, the values that break an option's
// constraint, the one global batch that every checked world size divides, and the experiment
// values an exactness condition is compared with.
#include "test_support.hpp"

#include "check/check.hpp"
#include "strata/errors.hpp"

TEST_CASE("--world-sizes is a sorted list of distinct positive integers") {
  CHECK(strata::parse_world_sizes("3,1,2,2") == std::vector<int>{1, 2, 3});
  CHECK(strata::parse_world_sizes("4") == std::vector<int>{4});
  for (const char* bad : {"", "0", "1,", ",2", "a,b", "-1", "1.5", "1 2", "99999999"}) {
    INFO(bad);
    CHECK_THROWS_AS(strata::parse_world_sizes(bad), strata::UsageError);
  }
}

TEST_CASE("every bound and choice list of an option yields a value that breaks it") {
  strata::OptionSpec at_least_one{"n", strata::OptionType::kInt, {}, "", strata::at_least(1)};
  auto v = strata::detail::violating_values(at_least_one);
  REQUIRE(v.size() == 1);
  CHECK(v[0].toml == "0");
  CHECK(at_least_one.check(std::int64_t{0}) != "");

  strata::OptionSpec positive{"lr", strata::OptionType::kFloat, {}, "", strata::positive()};
  v = strata::detail::violating_values(positive);
  REQUIRE(v.size() == 1);
  CHECK(v[0].toml == "0.0");
  CHECK(positive.check(0.0) != "");

  strata::OptionSpec choice{"mode", strata::OptionType::kString, {}, "", strata::one_of({"a", "b"})};
  v = strata::detail::violating_values(choice);
  REQUIRE(v.size() == 1);
  CHECK(choice.check(std::string("definitely_not_a_choice")) != "");

  strata::OptionSpec free{"name", strata::OptionType::kString, {}, "", {}};
  CHECK(strata::detail::violating_values(free).empty());
}

TEST_CASE("the check's global batch is a common multiple of every world size and the micro-batches") {
  CHECK(strata::detail::common_global_batch({1, 2}, 2, 24) == 24);
  CHECK(strata::detail::common_global_batch({1, 2, 3, 4}, 2, 24) == 24);
  CHECK(strata::detail::common_global_batch({5, 7}, 2, 24) == 70);
  CHECK(strata::detail::common_global_batch({1}, 1, 25) == 25);
}

TEST_CASE("an exactness condition on the experiment reads the workload's value as TOML text") {
  const strata::test::TempDir dir;
  const auto file = dir.write("w.toml", "[optimizer]\nname = \"sgd\"\nlr = 0.1\n[train]\nsteps = 24\n").string();
  CHECK(strata::detail::experiment_value(file, "optimizer.name") == "\"sgd\"");
  CHECK(strata::detail::experiment_value(file, "train.steps") == "24");
  CHECK(strata::detail::experiment_value(file, "optimizer.momentum").empty());
  CHECK(strata::detail::experiment_value(file, "model.name").empty());
}
