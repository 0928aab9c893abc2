// The plugin loader against fixture libraries built by the test suite, one case per directory.
#include "test_support.hpp"

#include <csignal>

#include "plugin_loader.hpp"
#include "strata/plugin.hpp"
#include "strata/errors.hpp"
#include "strata/strategy.hpp"

namespace fs = std::filesystem;

namespace {
fs::path fixture(const std::string& name) { return fs::path(STRATA_FIXTURE_PLUGIN_DIR) / name; }

/// Loads `dirs` in order into `registry` and returns the one library that did not load.
strata::PluginLoadFailure load_failure(const std::vector<fs::path>& dirs, strata::Registry& registry) {
  strata::PluginLoader loader(registry);
  for (const auto& d : dirs) loader.load_path(d);
  REQUIRE(loader.failures().size() == 1);
  return loader.failures()[0];
}
strata::PluginLoadFailure load_failure(const std::vector<fs::path>& dirs) {
  strata::Registry registry;
  return load_failure(dirs, registry);
}

bool contains(const strata::PluginLoadFailure& f, const std::string& text) {
  return f.reason.find(text) != std::string::npos;
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

TEST_CASE("one library registers several names and its objects keep it loaded") {
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
  auto f = load_failure({"/nonexistent/libstrata_strategy_x.so"});
  CHECK(f.path == "/nonexistent/libstrata_strategy_x.so");
  CHECK(contains(f, "does not exist"));
  CHECK(f.names.empty());
}

TEST_CASE("a library without the entry points is not a plugin") {
  auto f = load_failure({fixture("missing_symbol")});
  CHECK(f.path.string().find("missing_symbol") != std::string::npos);
  CHECK(contains(f, "not a Strata plugin"));
  CHECK(contains(f, "strata_plugin_abi_version"));
  CHECK(!f.fix.empty());
}

TEST_CASE("an ABI mismatch is refused before any C++ call, naming both versions") {
  auto f = load_failure({fixture("abi_mismatch")});
  CHECK(contains(f, "plugin ABI 99.0"));
  CHECK(contains(f, "ABI " + strata::abi_string(strata::kAbiVersion)));
  CHECK(f.names.empty());  // its manifest is not trusted, so not read
}

TEST_CASE("a plugin built against another LibTorch is refused") {
  auto f = load_failure({fixture("torch_mismatch")});
  CHECK(contains(f, "LibTorch 1.13.1"));
  CHECK(contains(f, std::string("LibTorch ") + TORCH_VERSION));
  CHECK(f.kind == "strategy");  // the manifest was read: the failure knows what it would provide
  CHECK(f.names == std::vector<std::string>{"fixture_old_torch"});
}

TEST_CASE("an unresolved symbol fails at load time with the loader's reason") {
  auto f = load_failure({fixture("undefined_symbol")});
  CHECK(contains(f, "the dynamic loader cannot load it"));
  CHECK(contains(f, "strata_fixture_function_that_does_not_exist"));
  CHECK(!contains(f, f.path.string()));  // dlerror's path prefix is not repeated
}

TEST_CASE("a register function that throws is reported, not propagated across C") {
  auto f = load_failure({fixture("register_throws")});
  CHECK(contains(f, "fixture register failure"));
  CHECK(f.path.string().find("register_throws") != std::string::npos);
}

TEST_CASE("a duplicate name across libraries names both, and the first one stays") {
  strata::Registry registry;
  auto f = load_failure({STRATA_PLUGIN_BUILD_DIR, fixture("duplicate")}, registry);
  CHECK(contains(f, "duplicate strategy name 'single'"));
  CHECK(contains(f, "libstrata_strategy_single.so"));
  CHECK(contains(f, "libstrata_strategy_fixture_duplicate.so"));
  CHECK(registry.at(strata::PluginKind::kStrategy, "single").library.find("libstrata_strategy_single.so") !=
        std::string::npos);
}

TEST_CASE("names registered must match the manifest, and a failed library leaves no entry behind") {
  strata::Registry registry;
  auto f = load_failure({fixture("wrong_names")}, registry);
  CHECK(contains(f, "fixture_declared"));
  CHECK(contains(f, "fixture_actual"));
  CHECK(f.names == std::vector<std::string>{"fixture_declared"});
  // It had registered fixture_actual before the check refused it: rolled back.
  CHECK(registry.find(strata::PluginKind::kStrategy, "fixture_actual") == nullptr);
  CHECK(registry.entries().empty());
}

TEST_CASE("a library that does not load stops no other") {
  strata::Registry registry;
  strata::PluginLoader loader(registry);
  for (const char* broken : {"missing_symbol", "wrong_names", "abi_mismatch", "undefined_symbol"})
    loader.load_path(fixture(broken));
  loader.load_path(fixture("good"));
  loader.load_path(STRATA_PLUGIN_BUILD_DIR);
  CHECK(loader.failures().size() == 4);
  CHECK(registry.find(strata::PluginKind::kStrategy, "fixture_echo_a") != nullptr);
  CHECK(registry.find(strata::PluginKind::kModel, "mlp") != nullptr);
  CHECK(registry.find(strata::PluginKind::kStrategy, "fixture_actual") == nullptr);
  // Trying a failed library again neither loads it nor records it twice.
  CHECK(!loader.load_library(fixture("missing_symbol") / "libstrata_fixture_missing_symbol.so"));
  CHECK(loader.failures().size() == 4);
}

TEST_CASE("the crash handlers around a library's code are gone once it has loaded") {
  // A handler of the host's own (doctest installs some too) must be back after every load.
  struct sigaction mine {};
  mine.sa_handler = [](int) {};
  sigemptyset(&mine.sa_mask);
  struct sigaction saved[2] {};
  ::sigaction(SIGSEGV, &mine, &saved[0]);
  ::sigaction(SIGABRT, nullptr, &saved[1]);
  {
    strata::Registry registry;
    strata::PluginLoader loader(registry);
    loader.load_path(fixture("good"));
    loader.load_path(fixture("wrong_names"));
  }
  struct sigaction now[2] {};
  ::sigaction(SIGSEGV, &saved[0], &now[0]);
  ::sigaction(SIGABRT, nullptr, &now[1]);
  CHECK((now[0].sa_handler == mine.sa_handler));
  CHECK((now[1].sa_handler == saved[1].sa_handler));
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
