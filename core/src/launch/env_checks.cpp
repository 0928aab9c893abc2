#include "launch/env_checks.hpp"

#include <fmt/format.h>

namespace strata {

namespace {

/// The first of `names` that is set, with its value, as "NAME=value"; empty when none is.
std::string first_set(const EnvLookup& env, std::initializer_list<const char*> names, std::string& value) {
  for (const char* name : names)
    if (auto v = env(name); v && !v->empty()) {
      value = *v;
      return fmt::format("{}={}", name, *v);
    }
  return {};
}

bool truthy(const std::string& v) { return v != "0" && v != "false" && v != "False" && v != "FALSE"; }

}  // namespace

std::vector<std::string> environment_warnings(const EnvLookup& env, bool nccl, bool cuda) {
  std::vector<std::string> out;
  std::string value;
  if (nccl) {
    if (auto set = first_set(env, {"TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"}, value); !set.empty() && truthy(value))
      out.push_back(set + ": every wait for a collective blocks the host, so communication no longer overlaps "
                          "compute, and c10d's watchdog does not run; unset it");
    if (auto set = first_set(env, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"}, value);
        !set.empty() && !truthy(value))
      out.push_back(set + ": a failed or timed-out collective no longer aborts its communicator, so a lost rank can "
                          "hang the job instead of ending it; unset it");
  }
  if (cuda) {
    if (auto set = first_set(env, {"CUDA_LAUNCH_BLOCKING"}, value); !set.empty() && truthy(value))
      out.push_back(set + ": every kernel launch waits for the GPU, so nothing overlaps and step times measure a "
                          "serialized device; unset it except to debug");
  }
  return out;
}

}  // namespace strata
