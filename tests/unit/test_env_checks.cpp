#include "test_support.hpp"
// Environment settings that change what a run measures or how it fails: one warning each, only
// where they apply.

#include <map>

#include "launch/env_checks.hpp"

namespace {

using strata::test::lookup_in;

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("blocking waits, disabled async error handling and blocking launches are each named once") {
  const auto w = strata::environment_warnings(lookup_in({{"TORCH_NCCL_BLOCKING_WAIT", "1"},
                                                         {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"},
                                                         {"CUDA_LAUNCH_BLOCKING", "1"}}),
                                              /*nccl=*/true, /*cuda=*/true);
  REQUIRE(w.size() == 3);
  CHECK(any_contains(w, "TORCH_NCCL_BLOCKING_WAIT=1: every wait for a collective blocks the host"));
  CHECK(any_contains(w, "TORCH_NCCL_ASYNC_ERROR_HANDLING=0: a failed or timed-out collective"));
  CHECK(any_contains(w, "CUDA_LAUNCH_BLOCKING=1: every kernel launch waits"));
  // The older names count too.
  const auto old = strata::environment_warnings(lookup_in({{"NCCL_BLOCKING_WAIT", "1"}, {"NCCL_ASYNC_ERROR_HANDLING", "0"}}),
                                                true, true);
  CHECK(old.size() == 2);
  CHECK(any_contains(old, "NCCL_BLOCKING_WAIT=1"));
}

TEST_CASE("the environment is quiet where the settings are harmless or do not apply") {
  CHECK(strata::environment_warnings(lookup_in({}), true, true).empty());
  CHECK(strata::environment_warnings(lookup_in({{"TORCH_NCCL_BLOCKING_WAIT", "0"},
                                                {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
                                                {"CUDA_LAUNCH_BLOCKING", "0"}}),
                                     true, true)
            .empty());
  // Gloo on the CPU: NCCL's and CUDA's settings change nothing.
  CHECK(strata::environment_warnings(lookup_in({{"TORCH_NCCL_BLOCKING_WAIT", "1"}, {"CUDA_LAUNCH_BLOCKING", "1"}}), false,
                                     false)
            .empty());
}
