// The doctest main of strata_unit_tests and strata_gpu_tests (tests/gpu compiles this file too).
//
// doctest_discover_tests makes each TEST_CASE a ctest entry that runs `--test-case=NAME`, and
// doctest exits 0 when its filters match no case. An entry whose name no longer names a case
// (a name that ctest's discovery split at ';', a case renamed or removed since the last build)
// would then report Passed having run nothing. So here:
//  - a run in which no test case started fails, naming the arguments (a case that skips by
//    exiting 77, as the GPU cases do without a GPU, has started: ctest reports it skipped);
//  - --list-test-cases (what the discovery reads at build time) fails on a name the discovery
//    cannot carry whole, so such a name breaks the build instead of becoming wrong entries.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device/cuda_support.hpp"

namespace {

/// Characters a test name must not hold: doctestAddTests.cmake reads the listing as a CMake list,
/// which splits at ';', groups across lines inside '[' ']' and escapes with '\'; doctest's
/// --test-case filter reads '\' as an escape too. (',' is fine: the discovery escapes it.)
constexpr const char* kUnsafeChars = ";[]\\";

/// What the listener saw of this run.
struct RunRecord {
  bool ran = false;                     ///< tests were run (not --list-test-cases, --count, --help ...)
  unsigned started = 0;                 ///< test cases that started
  unsigned registered = 0;              ///< test cases in the binary
  std::vector<std::string> bad_names;   ///< listed names holding one of kUnsafeChars
};

RunRecord& record() {
  static RunRecord r;
  return r;
}

/// Counts started cases and checks listed names; reports nothing itself.
class RunRecorder : public doctest::IReporter {
 public:
  explicit RunRecorder(const doctest::ContextOptions& options) : options_(options) {}

  void report_query(const doctest::QueryData& query) override {
    if (!options_.list_test_cases) return;
    for (unsigned i = 0; i < query.num_data; ++i) {
      const std::string name = query.data[i]->m_name;
      if (name.find_first_of(kUnsafeChars) != std::string::npos) record().bad_names.push_back(name);
    }
  }
  void test_run_start() override { record().ran = true; }
  void test_run_end(const doctest::TestRunStats& stats) override { record().registered = stats.numTestCases; }
  void test_case_start(const doctest::TestCaseData&) override { ++record().started; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

 private:
  const doctest::ContextOptions& options_;
};

REGISTER_LISTENER("strata_run_recorder", 1, RunRecorder);

}  // namespace

int main(int argc, char** argv) {
  strata::cuda_support::load_at_start();  // as the strata CLI: before anything asks LibTorch about CUDA
  doctest::Context context(argc, argv);
  const int rc = context.run();
  const char* self = argc > 0 ? argv[0] : "test binary";
  if (!record().bad_names.empty()) {
    for (const auto& name : record().bad_names)
      std::fprintf(stderr, "%s: the test case \"%s\" holds one of the characters %s, which ctest's test "
                   "discovery cannot carry in a name (it would split or merge entries)\n",
                   self, name.c_str(), kUnsafeChars);
    std::fprintf(stderr, "  fix: rename it (use ',', ':' or 'and' instead of ';')\n");
    return EXIT_FAILURE;
  }
  if (record().ran && record().started == 0) {
    std::string args;
    for (int i = 1; i < argc; ++i) args += std::string(" ") + argv[i];
    std::fprintf(stderr, "%s: no test case ran: the arguments '%s' select none of the %u test cases. A run "
                 "that runs nothing fails here rather than pass.\n"
                 "  fix: for a ctest entry, rebuild (the case was renamed or removed since the tests were "
                 "discovered); by hand, check the name with --list-test-cases\n",
                 self, args.empty() ? "" : args.c_str() + 1, record().registered);
    return EXIT_FAILURE;
  }
  return rc;
}
