// The registry: duplicate names, unknown names with suggestions, factory failures.
#include "test_support.hpp"

#include "strata/errors.hpp"
#include "strata/registry.hpp"
#include "strata/strategy.hpp"
#include "text/suggest.hpp"

namespace {
struct Empty {};
auto null_strategy = [](const Empty&) { return std::shared_ptr<strata::Strategy>(); };
}  // namespace

TEST_CASE("a duplicate name of the same kind is refused, naming both libraries") {
  strata::Registry r;
  r.set_current_library("/p/libfirst.so", nullptr);
  r.add_strategy("ddp", "first", strata::Schema<Empty>{}, null_strategy);
  r.set_current_library("/p/libsecond.so", nullptr);
  try {
    r.add_strategy("ddp", "second", strata::Schema<Empty>{}, null_strategy);
    FAIL("duplicate accepted");
  } catch (const strata::PluginError& e) {
    const std::string what = e.what();
    CHECK(what.find("duplicate strategy name 'ddp'") != std::string::npos);
    CHECK(what.find("libfirst.so") != std::string::npos);
    CHECK(what.find("libsecond.so") != std::string::npos);
  }
}

TEST_CASE("the same name may exist once per kind") {
  strata::Registry r;
  r.add_strategy("x", "", strata::Schema<Empty>{}, null_strategy);
  r.add_dataset("x", "", strata::Schema<Empty>{},
                [](const Empty&, const strata::DatasetContext&) { return std::shared_ptr<strata::Dataset>(); });
  CHECK(r.names(strata::PluginKind::kStrategy) == std::vector<std::string>{"x"});
  CHECK(r.names(strata::PluginKind::kDataset) == std::vector<std::string>{"x"});
}

TEST_CASE("an unknown name lists the known ones and suggests the nearest") {
  strata::Registry r;
  for (const char* n : {"zero1", "zero2", "ddp"}) r.add_strategy(n, "", strata::Schema<Empty>{}, null_strategy);
  try {
    r.at(strata::PluginKind::kStrategy, "zero4");
    FAIL("unknown accepted");
  } catch (const strata::PluginError& e) {
    const std::string what = e.what();
    CHECK(what.find("available: ddp, zero1, zero2") != std::string::npos);
    CHECK(what.find("Did you mean 'zero1'?") != std::string::npos);
  }
}

TEST_CASE("factory failures become plugin errors and option errors pass through") {
  strata::Registry r;
  r.set_current_library("/p/libbad.so", nullptr);
  r.add_strategy("boom", "", strata::Schema<Empty>{},
                 [](const Empty&) -> std::shared_ptr<strata::Strategy> { throw std::runtime_error("kaput"); });
  r.add_strategy("opt", "", strata::Schema<Empty>{}, [](const Empty&) -> std::shared_ptr<strata::Strategy> {
    throw strata::OptionError("bucket_mb", "too big");
  });
  r.add_strategy("null", "", strata::Schema<Empty>{}, null_strategy);
  try {
    r.create_strategy("boom", {});
    FAIL("no error");
  } catch (const strata::PluginError& e) {
    CHECK(e.library() == "/p/libbad.so");
    CHECK(std::string(e.what()).find("kaput") != std::string::npos);
  }
  CHECK_THROWS_AS(r.create_strategy("opt", {}), strata::OptionError);
  CHECK_THROWS_WITH_AS(r.create_strategy("null", {}), doctest::Contains("returned no object"), strata::PluginError);
}

TEST_CASE("suggestions count a swap of two adjacent letters as one edit") {
  CHECK(strata::detail::edit_distance("mpl", "mlp") == 1);
  CHECK(strata::detail::edit_distance("mpl", "dp") == 2);
  CHECK(strata::detail::edit_distance("kitten", "sitting") == 3);
  CHECK(strata::detail::closest_match("mpl", {"dp", "mlp"}) == "mlp");
  CHECK(strata::detail::closest_match("zzzzzz", {"dp", "mlp"}).empty());
}

TEST_CASE("a strategy's equivalence and option matrix name its own options, and a band is positive") {
  struct Options {
    std::int64_t sync_every = 4;
  };
  strata::Schema<Options> schema;
  schema.option("sync_every", &Options::sync_every, "steps between averages");
  const auto make = [](const Options&) { return std::shared_ptr<strata::Strategy>(); };
  strata::Registry r;
  r.add_strategy("ok", "", schema, make,
                 {strata::Placement::rank_per_device(),
                  strata::Equivalence::exact_under({{"sync_every", "1"}}, 0.5, "local steps"),
                  {{"every step", {{"sync_every", "1"}}}}});
  CHECK(r.at(strata::PluginKind::kStrategy, "ok").traits.option_matrix.size() == 1);
  CHECK_THROWS_WITH_AS(r.add_strategy("typo", "", schema, make,
                                      {strata::Placement::rank_per_device(), {}, {{"row", {{"sync_evry", "1"}}}}}),
                       doctest::Contains("sync_evry"), strata::PluginError);
  CHECK_THROWS_WITH_AS(r.add_strategy("exact_typo", "", schema, make,
                                      strata::Equivalence::exact_under({{"synk", "1"}}, 0.5, "why")),
                       doctest::Contains("synk"), strata::PluginError);
  // A dotted name is a condition on the experiment, not an option.
  r.add_strategy("sgd_only", "", schema, make,
                 strata::Equivalence::exact_under({{"sync_every", "1"}, {"optimizer.name", "\"sgd\""}}, 0.5, "why"));
  CHECK(r.at(strata::PluginKind::kStrategy, "sgd_only").traits.equivalence.exact_when.size() == 2);
  CHECK_THROWS_WITH_AS(r.add_strategy("no_band", "", schema, make, strata::Equivalence::within_loss_band(0, "why")),
                       doctest::Contains("positive loss band"), strata::PluginError);
}
