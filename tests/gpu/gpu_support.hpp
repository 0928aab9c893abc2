// What every gpu-labelled test shares: skipping (exit 77) where there is no GPU.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>
#include <torch/cuda.h>

namespace strata::test {

/// Skips (exit 77: ctest's Skipped) where this machine shows no GPU at all; a GPU that is there
/// but that LibTorch cannot use is a failure, not a skip.
inline void require_gpu() {
  if (torch::cuda::is_available()) return;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const bool hidden = visible != nullptr && (std::string(visible).empty() || std::string(visible) == "-1");
  if (!hidden && std::filesystem::exists("/dev/nvidia0"))
    FAIL("a GPU is present (/dev/nvidia0) but LibTorch sees no CUDA device (torch::cuda::is_available() is "
         "false): check the driver and the CUDA build of LibTorch");
  std::printf("skipped: no GPU on this machine (%s)\n",
              hidden ? "CUDA_VISIBLE_DEVICES hides them" : "no /dev/nvidia0, and LibTorch sees no CUDA device");
  std::fflush(stdout);
  std::_Exit(77);
}

}  // namespace strata::test
