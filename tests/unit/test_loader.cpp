// The plugin loader against fixture libraries built by the test suite, one case per directory.
#include "test_support.hpp"

#include "plugin_loader.hpp"
#include "strata/plugin.hpp"
#include "strata/errors.hpp"
#include "strata/strategy.hpp"

namespace fs = std::filesystem;

namespace {
fs::path fixture(const std::string& name) { return fs::path(STRATA_FIXTURE_PLUGIN_DIR) / name; }

/// Loads `dirs` in order into a fresh registry and returns the PluginError raised.
strata::PluginError load_error(const std::vector<fs::path>& dirs) {
  strata::Registry registry;
  strata::PluginLoader loader(registry);
  try {
    for (const auto& d : dirs) loader.load_path(d);
  } catch (const strata::PluginError& e) {
    return e;
  }
  FAIL("no PluginError");
  throw std::logic_error("unreachable");
}

bool contains(const std::exception& e, const std::string& text) {
  return std::string(e.what()).find(text) != std::string::npos;
}
}  // namespace

TEST_CASE("the built-in plugins load, each from its own library") {
  strata::Registry registry;
  strata::PluginLoader loader(registry);
  loader.load_directory(STRATA_PLUGIN_BUILD_DIR);
  CHECK(registry.find(strata::PluginKind::kStrategy, "single") != nullptr);
  CHECK(registry.find(strata::PluginKind::kModel, "mlp") != nullptr);
  CHECK(registry.find(strata::PluginKind::kModel, "cnn") != nullptr);
  CHECK(registry.find(strata::PluginKind::kDataset, "synthetic") != nullptr);
  CHECK(registry.find(strata::PluginKind::kDataset, "fashion_mnist") != nullptr);
  CHECK(registry.at(strata::PluginKind::kModel, "mlp").library.find("libstrata_model_mlp.so") != std::string::npos);
  CHECK(loader.libraries().size() >= 5);
  loader.load_directory(STRATA_PLUGIN_BUILD_DIR);  // loading again is a no-op, not a duplicate
}

TEST_CASE("one library registers several names; its objects keep it loaded") {
  std::shared_ptr<strata::Strategy> strategy;
  {
    strata::Registry registry;
    strata::PluginLoader loader(registry);
    loader.load_directory(fixture("good"));
    CHECK(registry.names(strata::PluginKind::kStrategy) == std::vector<std::string>{"fixture_echo_a", "fixture_echo_b"});
    REQUIRE(loader.libraries().size() == 1);
    CHECK(loader.libraries()[0].names == "fixture_echo_a,fixture_echo_b");
    CHECK(loader.libraries()[0].torch_version == TORCH_VERSION);
    strata::Options options;
    options.set("answer", std::int64_t{7});
    strategy = registry.create_strategy("fixture_echo_b", options);
  }
  // Registry and loader are gone; the object's code still runs from its library.
  REQUIRE(strategy);
  CHECK(strategy->finish_gradients(0).item<double>() == 7.0);
}

TEST_CASE("a missing library is named") {
  auto e = load_error({"/nonexistent/libstrata_strategy_x.so"});
  CHECK(e.library() == "/nonexistent/libstrata_strategy_x.so");
  CHECK(contains(e, "does not exist"));
}

TEST_CASE("a library without the entry points is not a plugin") {
  auto e = load_error({fixture("missing_symbol")});
  CHECK(e.library().find("missing_symbol") != std::string::npos);
  CHECK(contains(e, "is not a Strata plugin"));
  CHECK(contains(e, "strata_plugin_abi_version"));
}

TEST_CASE("an ABI mismatch is refused before any C++ call, naming both versions") {
  auto e = load_error({fixture("abi_mismatch")});
  CHECK(contains(e, "plugin ABI 99.0"));
  CHECK(contains(e, "ABI " + strata::abi_string(strata::kAbiVersion)));
  CHECK(e.exit_code() == 2);
}

TEST_CASE("a plugin built against another LibTorch is refused") {
  auto e = load_error({fixture("torch_mismatch")});
  CHECK(contains(e, "LibTorch 1.13.1"));
  CHECK(contains(e, std::string("LibTorch ") + TORCH_VERSION));
}

TEST_CASE("an unresolved symbol fails at load time with the loader's reason") {
  auto e = load_error({fixture("undefined_symbol")});
  CHECK(contains(e, "cannot load plugin library"));
  CHECK(contains(e, "strata_fixture_function_that_does_not_exist"));
}

TEST_CASE("a register function that throws is reported, not propagated across C") {
  auto e = load_error({fixture("register_throws")});
  CHECK(contains(e, "fixture register failure"));
  CHECK(e.library().find("register_throws") != std::string::npos);
}

TEST_CASE("a duplicate name across libraries names both") {
  auto e = load_error({STRATA_PLUGIN_BUILD_DIR, fixture("duplicate")});
  CHECK(contains(e, "duplicate strategy name 'single'"));
  CHECK(contains(e, "libstrata_strategy_single.so"));
  CHECK(contains(e, "libstrata_strategy_fixture_duplicate.so"));
}

TEST_CASE("names registered must match the manifest") {
  auto e = load_error({fixture("wrong_names")});
  CHECK(contains(e, "fixture_declared"));
  CHECK(contains(e, "fixture_actual"));
}

TEST_CASE("a factory that throws gives a plugin error naming the library") {
  strata::Registry registry;
  strata::PluginLoader loader(registry);
  loader.load_directory(fixture("throwing_factory"));
  try {
    registry.create_strategy("fixture_throwing", {});
    FAIL("no error");
  } catch (const strata::PluginError& e) {
    CHECK(e.library().find("throwing_factory") != std::string::npos);
    CHECK(contains(e, "fixture factory failure"));
  }
}
