// libFuzzer target of the experiment parser: strata::load_experiment on arbitrary bytes.
//
// A strata::Error is the expected answer to a bad file; its paragraph (format_error, as the CLI
// prints it) must hold no control character but newlines and no line over 2000 characters, and its
// message and fix no newline at all. Any other exception, a sanitizer report or a violated
// message rule is a crash libFuzzer keeps.
// Built with clang only, as its own CMake project (tests/fuzz/libfuzzer; STRATA_BUILD_FUZZER=ON
// builds it from the main build and adds the ctest fuzz.experiment_libfuzzer).
//
//   build/tests/fuzz/libfuzzer/strata_fuzz_experiment -max_len=65536 CORPUS_DIR experiments

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "config/experiment.hpp"
#include "text/errors_text.hpp"

namespace {

/// Aborts (a crash libFuzzer reports with the input) when `text` breaks a message rule.
void check_message(const std::string& text) {
  std::size_t line = 0;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    line = ch == '\n' ? 0 : line + 1;
    if ((c < 0x20 && ch != '\n') || c == 0x7f || line > 2000) {
      std::fprintf(stderr, "bad error message (control character 0x%02x or a line over 2000 characters):\n%s\n", c,
                   text.substr(0, 4000).c_str());
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // load_experiment reads a file: one per fuzzing process, rewritten for every input, removed
  // at exit.
  struct TempFile {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("strata-fuzz-" + std::to_string(::getpid()) + ".toml");
    ~TempFile() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  };
  static const TempFile temp;
  const auto& file = temp.path;
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto experiment = strata::load_experiment(file);
    (void)strata::resolved_toml(experiment);  // what run.cpp writes as config.toml
  } catch (const strata::Error& e) {
    check_message(strata::detail::format_error(e));
    // The parser's messages are one line each: a newline there came from a value, echoed raw.
    for (const std::string& part : {std::string(e.what()), e.fix()})
      if (part.find('\n') != std::string::npos) {
        std::fprintf(stderr, "newline in an error message or fix:\n%s\n", part.substr(0, 4000).c_str());
        std::abort();
      }
  }
  return 0;
}
