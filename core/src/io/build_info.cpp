#include "io/build_info.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>

#include "device/cuda_support.hpp"

// STRATA_GIT_COMMIT: written by the strata_git_commit target of core/CMakeLists.txt at every
// build, and only when it changed, so a new commit recompiles this file alone.
#include "strata_git_commit.h"

namespace strata {

namespace {

/// The CUDA runtime version LibTorch's CUDA library was compiled with (CUDART_VERSION), asked of
/// the library when this process loaded it (device/cuda_support.hpp); otherwise the version of
/// LibTorch's CUDA build read when Strata was configured (its torch/version.py,
/// STRATA_TORCH_CUDA_VERSION). "none" for a LibTorch without CUDA.
std::string cuda_version() {
  if (cuda_support::loaded()) try {
      const long v = at::detail::getCUDAHooks().versionCUDART();
      if (v > 0) return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
    } catch (const std::exception&) {
    }
  const std::string configured = STRATA_TORCH_CUDA_VERSION;
  return configured.empty() ? "none" : configured;
}

/// The NCCL library loaded into this process (LibTorch's CUDA library links it), asked through
/// its C API without its header; "none" when no NCCL is loaded.
std::string nccl_version() {
  using GetVersion = int (*)(int*);
  auto* get = reinterpret_cast<GetVersion>(::dlsym(RTLD_DEFAULT, "ncclGetVersion"));
  int code = 0;
  if (get == nullptr || get(&code) != 0 || code <= 0) return "none";
  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + minor*100 + patch before.
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100);
}

}  // namespace

const BuildInfo& build_info() {
  static const BuildInfo info{STRATA_VERSION, STRATA_GIT_COMMIT, STRATA_TORCH_VERSION, cuda_version(), nccl_version()};
  return info;
}

Json versions_json() {
  const auto& b = build_info();
  Json j = Json::object();
  j["strata"] = b.version;
  j["commit"] = b.commit;
  j["libtorch"] = b.torch;
  j["cuda"] = b.cuda;
  j["nccl"] = b.nccl;
  return j;
}

std::string version_text() {
  const auto& b = build_info();
  const std::string absent = cuda_support::why_absent();
  return fmt::format("strata {}\ncommit: {}\nLibTorch: {}\nCUDA: {} (LibTorch's build{})\nNCCL: {}\n", b.version,
                     b.commit, b.torch, b.cuda,
                     b.cuda == "none" || absent.empty() ? "" : "; its CUDA library is not loaded: " + absent, b.nccl);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown";
  return buf;
}

}  // namespace strata
