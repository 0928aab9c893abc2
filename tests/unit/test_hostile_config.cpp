// Hostile experiment files: whatever the values, load_experiment answers with a ConfigError at the
// key (never a crash, never a value `run` would refuse later), and messages show values escaped
// and shortened.
#include "test_support.hpp"

#include <thread>

#include "config/experiment.hpp"
#include "strata/errors.hpp"
#include "text/errors_text.hpp"
#include "text/suggest.hpp"

using strata::test::TempDir;

namespace {

const char* kBase = R"([experiment]
name = "t"
[model]
name = "toy"
[dataset]
name = "toyset"
[strategy]
name = "single"
)";

/// The ConfigError that `overrides` on kBase raise; fails when none is raised.
strata::ConfigError hostile_error(const std::vector<std::string>& overrides, const std::string& text = kBase) {
  TempDir dir;
  const auto file = dir.write("exp.toml", text);
  try {
    strata::load_experiment(file, overrides);
  } catch (const strata::ConfigError& err) {
    return err;
  }
  FAIL("no ConfigError for " << (overrides.empty() ? text : overrides.front()).substr(0, 200));
  throw std::logic_error("unreachable");
}

std::string message_of(const strata::ConfigError& err) { return strata::detail::format_error(err); }

}  // namespace

TEST_CASE("a huge name or device is an error with the value shortened, not a stack overflow") {
  const std::string huge(50000, 'a');
  auto err = hostile_error({"experiment.name=" + huge});
  CHECK(err.key() == "experiment.name");
  CHECK(message_of(err).size() < 1000);
  CHECK(message_of(err).find("more bytes") != std::string::npos);
  auto device = hostile_error({"train.device=cuda:" + std::string(50000, '7')});
  CHECK(device.key() == "train.device");
  CHECK(message_of(device).size() < 1000);
  CHECK(hostile_error({"train.device=cuda:128"}).key() == "train.device");
  CHECK(hostile_error({"train.device=cuda:-1"}).key() == "train.device");
  TempDir dir;
  CHECK(strata::load_experiment(dir.write("e.toml", kBase), {"train.device=cuda:7"}).train.device == "cuda:7");
}

TEST_CASE("names that are not one usable path component are errors") {
  for (const std::string& bad : std::vector<std::string>{"..", ".", "a/b", std::string(256, 'n'), "a\tb"})
    CHECK(hostile_error({"experiment.name=\"" + bad + "\""}).key() == "experiment.name");
  TempDir dir;
  CHECK(strata::load_experiment(dir.write("e.toml", kBase), {"experiment.name=" + std::string(255, 'n')})
            .experiment.name.size() == 255);
  CHECK(hostile_error({"experiment.out_dir=" + std::string(300, 'o')}).key() == "experiment.out_dir");
  CHECK(hostile_error({"experiment.out_dir=\"a\\u0000b\""}).key() == "experiment.out_dir");
}

TEST_CASE("durations that overflow, vanish or are too short to connect are errors") {
  for (const char* v : {"1e308", "1e-300", "0.001", "-1", "nan", "inf"})
    CHECK(hostile_error({std::string("distributed.timeout_s=") + v}).key() == "distributed.timeout_s");
  for (const char* v : {"1e308", "1e-300", "0.5", "-1"})
    CHECK(hostile_error({std::string("distributed.heartbeat_s=") + v}).key() == "distributed.heartbeat_s");
  TempDir dir;
  const auto e = strata::load_experiment(dir.write("e.toml", kBase), {"distributed.heartbeat_s=0", "distributed.timeout_s=1"});
  CHECK(e.distributed.heartbeat_s == 0);
}

TEST_CASE("thread and rank counts beyond the machine are errors") {
  const auto threads = std::max(1u, std::thread::hardware_concurrency());
  CHECK(hostile_error({"train.threads=" + std::to_string(threads + 1)}).key() == "train.threads");
  CHECK(hostile_error({"train.threads=100000"}).key() == "train.threads");
  CHECK(hostile_error({"distributed.nproc=100000"}).key() == "distributed.nproc");
  CHECK(hostile_error({"train.steps=9223372036854775807"}).key() == "train.steps");
  TempDir dir;
  CHECK(strata::load_experiment(dir.write("e.toml", kBase), {"train.threads=" + std::to_string(threads)}).train.threads ==
        threads);
}

TEST_CASE("huge strings and arrays are refused by size, before any check that walks them") {
  const auto list = hostile_error({"optimizer.betas=[" + std::string(20000, '1') + "]"});
  CHECK(list.key() == "optimizer.betas");
  std::string many = "optimizer.betas=[";
  for (int i = 0; i < 5000; ++i) many += "0.5,";
  many += "0.5]";
  auto err = hostile_error({many});
  CHECK(std::string(err.what()).find("at most 4096 elements") != std::string::npos);
  auto path = hostile_error({"train.init_from=" + std::string(5000, 'p')});
  CHECK(std::string(path.what()).find("at most 4096 bytes") != std::string::npos);
}

TEST_CASE("messages escape control characters and NULs from the input") {
  auto err = hostile_error({"train.lr_schedule=\"co\\u001b[31msine\\u0007\""});
  const auto text = message_of(err);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\x07') == std::string::npos);
  CHECK(text.find("\\x1b[31m") != std::string::npos);
  auto key = hostile_error({}, std::string(kBase) + "[train]\n\"st\\u0000eps\" = 1\n");
  CHECK(message_of(key).find('\0') == std::string::npos);
  CHECK(strata::detail::shown("a\nb\tc\x01") == "a\\nb\\tc\\x01");
  CHECK(strata::detail::shown(std::string(1000, 'x'), 80).size() < 120);
  CHECK(strata::detail::shown("h\xc3\xa9llo") == "h\xc3\xa9llo");     // UTF-8 passes
  CHECK(strata::detail::shown("\xc2\x9b" "2J") == "\\xc2\\x9b2J");  // a C1 control (CSI) does not
  CHECK(strata::detail::terminal_safe("line one\nline\x1b two") == "line one\nline\\x1b two");
}

TEST_CASE("C++ stack text from LibTorch never reaches a message") {
  const std::runtime_error enforce(
      "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried to allocate 64 "
      "bytes.\nframe #0: c10::ThrowEnforceNotMet(char const*, int, char const*, std::string const&, void const*) + "
      "0x4c (0x7f in libc10.so)\nframe #1: ...");
  const auto text = strata::detail::exception_text(enforce);
  CHECK(text == "data. DefaultCPUAllocator: not enough memory: you tried to allocate 64 bytes.");
  const std::runtime_error raised("bad thing\nException raised from foo at bar.cpp:1 (most recent call first):\nframe #0: x");
  CHECK(strata::detail::exception_text(raised) == "bad thing");
}

TEST_CASE("the experiment file itself: deep keys, special files and size are refused before parsing") {
  TempDir dir;
  std::string deep = std::string(kBase) + "[train]\n";
  for (int i = 0; i < 100000; ++i) deep += "a.";
  deep += "a = 1\n";
  auto err = hostile_error({}, deep);  // toml++ recursed once per part: 100000 parts overflowed the stack
  CHECK(err.where().line == 10);
  CHECK(std::string(err.what()).find("100001 dotted parts") != std::string::npos);
  std::string floats = std::string(kBase) + "[optimizer]\nbetas = [\n";
  for (int i = 0; i < 200; ++i) floats += "0.5, ";
  floats += "0.5]\n";  // many dots on a line that is not a key
  CHECK(std::string(hostile_error({}, floats).what()).find("dotted parts") == std::string::npos);
  for (const char* special : {"/dev/zero", "/dev/null", "/"}) {
    try {
      strata::load_experiment(special);
      FAIL("loaded " << special);
    } catch (const strata::ConfigError& e) {
      CHECK(std::string(e.what()).find("not found") == std::string::npos);
    }
  }
  const auto big = dir.write("big.toml", std::string(kBase) + "# " + std::string(9 << 20, 'x') + "\n");
  CHECK_THROWS_WITH_AS(strata::load_experiment(big), doctest::Contains("MiB"), strata::ConfigError);
}

TEST_CASE("deep keys inside inline tables and overrides are refused, strings are not keys") {
  std::string key;
  for (int i = 0; i < 150000; ++i) key += "a.";
  key += "a";
  // toml++ recursed once per part inside an inline table too (150000 parts crashed validate).
  auto inline_key = hostile_error({}, std::string(kBase) + "[model]\nhidden = [{ " + key + " = 1 }]\n");
  CHECK(inline_key.where().line == 10);
  CHECK(inline_key.where().column == 13);
  CHECK(std::string(inline_key.what()).find("150001 dotted parts; at most 64") != std::string::npos);
  CHECK(message_of(inline_key).size() < 1000);
  auto override_key = hostile_error({key.substr(0, 399) + "=1"});
  CHECK(std::string(override_key.what()).find("200 dotted parts") != std::string::npos);
  CHECK(override_key.where().file.rfind("--set", 0) == 0);
  auto override_value = hostile_error({"model.hidden={" + key + "=1}"});
  CHECK(override_value.key() == "model.hidden");
  CHECK(std::string(override_value.what()).find("dotted parts") != std::string::npos);
  // Dots inside strings, multi-line ones included, and in comments are not key parts.
  std::string quoted = kBase;
  quoted.replace(quoted.find("name = \"t\""), 10, "name = \"t\"  # " + key + "\nnote = \"\"\"\n" + key + "\n\"\"\"");
  const auto error = [&] {
    try {
      TempDir dir;
      strata::load_experiment(dir.write("exp.toml", quoted));
    } catch (const strata::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK(error.find("dotted parts") == std::string::npos);
}

TEST_CASE("a newline inside a value cannot split the printed paragraph") {
  const auto text = message_of(hostile_error({"optimizer.name=\"sgd\\n  fix: rm -rf\""}));
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);  // only the one before the real fix
  CHECK(text.find("sgd\\n  fix: rm -rf") != std::string::npos);
}
