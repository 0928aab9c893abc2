#pragma once
// LibTorch's CUDA half in this process. libstrata_core links LibTorch's CPU library and c10_cuda
// only; libtorch_cuda (the CUDA kernels, cuBLAS, cuDNN, NCCL) comes with libstrata_cuda, which
// load_at_start() opens on a machine with an NVIDIA GPU. Elsewhere no process pays for loading it
// (0.16 s a process on 2 cores: every command, every rank).
//
// LibTorch settles on the first question about CUDA whether CUDA exists in the process for good
// (at::detail::getCUDAHooks() keeps what it found then), so main() calls load_at_start() before
// anything else.

#include <filesystem>
#include <string>

namespace strata::cuda_support {

/// Opens libstrata_cuda (beside libstrata_core) with its dependencies, unless STRATA_CUDA=0, or
/// CUDA_VISIBLE_DEVICES hides every GPU, or the machine shows no NVIDIA device (/dev/nvidia0,
/// /dev/nvidia1, ..., the driver's /proc/driver/nvidia/gpus or WSL's /dev/dxg); STRATA_CUDA=1
/// opens it whatever the machine shows (0/1, off/on, false/true, no/yes). A
/// library that does not open is said once on stderr when the machine has a GPU or STRATA_CUDA=1
/// asked for it, and the process goes on without CUDA. Idempotent.
void load_at_start();

/// Where libstrata_cuda is looked for: beside libstrata_core.
std::filesystem::path library_path();

/// True once libstrata_cuda is open.
bool loaded();

/// Why libstrata_cuda is not open, for the messages of whatever needs CUDA ("" when it is open):
/// e.g. "this machine shows no NVIDIA GPU (no /dev/nvidia0)".
std::string why_absent();

}  // namespace strata::cuda_support
