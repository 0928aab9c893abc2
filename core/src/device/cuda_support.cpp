#include "device/cuda_support.hpp"

#include <dlfcn.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>

#include <fmt/format.h>

namespace strata::cuda_support {

namespace fs = std::filesystem;

namespace {

std::once_flag once;
bool open_ = false;
std::string absent = "load_at_start() was not called";

/// The reason not to look for a GPU, or nothing when the machine may have one.
std::optional<std::string> reason_to_skip() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string v = visible;
    if (v.empty() || v == "-1" || v == "none")
      return fmt::format("CUDA_VISIBLE_DEVICES=\"{}\" hides every GPU from this process", v);
  }
  std::error_code ec;
  if (fs::exists("/dev/dxg", ec)) return std::nullopt;  // WSL's GPU
  // The driver's own list: there while its module is loaded, also where no /dev/nvidiaN exists yet
  // (made by the first CUDA program on a node without the udev rule) and in GPU containers.
  if (!fs::is_empty("/proc/driver/nvidia/gpus", ec) && !ec) return std::nullopt;
  ec.clear();
  for (auto it = fs::directory_iterator("/dev", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        name.find_first_not_of("0123456789", 6) == std::string::npos)
      return std::nullopt;
  }
  return std::string("this machine shows no NVIDIA GPU (no /dev/nvidia0, /dev/nvidia1, ...)");
}

void open_library(bool asked) {
  const fs::path path = library_path();
  // RTLD_GLOBAL: LibTorch's CUDA kernels, hooks and allocator register themselves as it loads and
  // serve every later library; RTLD_NOW: a missing symbol is said here, not in the middle of a run.
  if (::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) {
    open_ = true;
    absent.clear();
    return;
  }
  const char* why = ::dlerror();
  absent = fmt::format("{} did not load ({})", path.string(), why != nullptr ? why : "no reason given");
  std::fprintf(stderr,
               "strata: warning: %s; this process runs without CUDA. %s\n", absent.c_str(),
               asked ? "Unset STRATA_CUDA, or rebuild Strata with the CUDA build of LibTorch."
                     : "Check that LibTorch's CUDA libraries (torch/lib, the nvidia-* packages beside it) are "
                       "complete, or set STRATA_CUDA=0 to run on the CPU without this warning.");
}

}  // namespace

fs::path library_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&why_absent), &info) != 0 && info.dli_fname != nullptr)
    return fs::path(info.dli_fname).parent_path() / "libstrata_cuda.so";
  return "libstrata_cuda.so";
}

void load_at_start() {
  std::call_once(once, [] {
    const char* setting = std::getenv("STRATA_CUDA");
    std::string s = setting != nullptr ? setting : "";
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "0" || s == "off" || s == "false" || s == "no") {
      absent = fmt::format("STRATA_CUDA={} keeps it out", setting);
      return;
    }
    const bool asked = s == "1" || s == "on" || s == "true" || s == "yes";
    if (!asked && !s.empty())
      std::fprintf(stderr, "strata: warning: STRATA_CUDA=%s is neither 0 nor 1 (off/on, false/true, no/yes): taken as "
                           "unset, so LibTorch's CUDA library loads where a GPU shows\n", setting);
    if (!asked) {
      if (auto skip = reason_to_skip()) {
        absent = *skip;
        return;
      }
    }
    open_library(asked);
  });
}

bool loaded() { return open_; }

std::string why_absent() { return absent; }

}  // namespace strata::cuda_support
