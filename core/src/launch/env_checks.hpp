#pragma once
/// \file env_checks.hpp
/// Settings in the environment that silently change what a run measures or how it fails (some
/// clusters set them for every job): each gets a one-line warning at start saying what it costs.

#include <string>
#include <vector>

#include "job/world.hpp"

namespace strata {

/// The warnings for `env` of a rank whose collectives run over NCCL (`nccl`) and whose tensors
/// live on a GPU (`cuda`):
///   TORCH_NCCL_BLOCKING_WAIT / NCCL_BLOCKING_WAIT = 1: every wait blocks the host, overlap goes,
///       and c10d's watchdog does not run;
///   TORCH_NCCL_ASYNC_ERROR_HANDLING / NCCL_ASYNC_ERROR_HANDLING = 0: a failed or timed-out
///       collective no longer aborts its communicator, so a lost rank can hang the job;
///   CUDA_LAUNCH_BLOCKING = 1: every kernel launch waits for the GPU, so step times measure a
///       serialized device and nothing overlaps.
std::vector<std::string> environment_warnings(const EnvLookup& env, bool nccl, bool cuda);

}  // namespace strata
