#include "launch/device_choice.hpp"

#include <cstdlib>

#include <fmt/format.h>
#include <torch/cuda.h>

#include "device/cuda_support.hpp"
#include "job/world.hpp"
#include "strata/errors.hpp"

namespace strata {

namespace {

c10::Device gpu(int index) { return {c10::kCUDA, static_cast<c10::DeviceIndex>(index)}; }

std::string gpus(int n) { return fmt::format("{} CUDA device{}", n, n == 1 ? "" : "s"); }

/// What the rank sees and who started it, for messages.
std::string seen(int local_rank, int local_world_size, const DeviceView& v) {
  return fmt::format("local rank {} of {} on this host{} sees {} (CUDA_VISIBLE_DEVICES={}, started by {})", local_rank,
                     local_world_size, v.local_rank_source.empty() ? "" : " (" + v.local_rank_source + ")",
                     gpus(v.visible_gpus), v.visible_env.empty() ? "(unset)" : v.visible_env,
                     v.launcher.empty() ? "this process" : v.launcher);
}

constexpr const char* kBindingFix =
    "Give every rank a GPU of its own: make all of the host's GPUs visible to every rank (then each takes "
    "cuda:LOCAL_RANK), or bind one GPU to each rank (Slurm: --gpus-per-task=1 or --gpu-bind=single:1; a "
    "per-rank CUDA_VISIBLE_DEVICES), or start at most as many ranks per host as it has GPUs.";

}  // namespace

DeviceChoice choose_device(const std::string& requested, int local_rank, int local_world_size, const DeviceView& v) {
  if (requested == "cpu") return {};
  const int n = v.visible_gpus;
  if (requested == "auto" && n <= 0) return {};
  if (n <= 0)
    throw Error("device \"" + requested + "\" was requested but this process sees no CUDA device (CUDA_VISIBLE_DEVICES=" +
                    (v.visible_env.empty() ? "(unset)" : v.visible_env) + ")" +
                    (v.cuda_absent.empty() ? "" : "; LibTorch's CUDA library is not loaded: " + v.cuda_absent) + ".",
                "Use device = \"cpu\" or \"auto\", or run on a machine with a GPU (and check CUDA_VISIBLE_DEVICES).");
  if (requested == "auto" || requested == "cuda") {
    if (n >= local_world_size) return {gpu(local_rank), ""};
    // The launcher bound one GPU to this rank: it set CUDA_VISIBLE_DEVICES (Slurm's binding, a per-rank
    // value). Unset, the one GPU is the host's, and every rank of the host would take it (NCCL: "Duplicate GPU").
    if (n == 1 && !v.own_launcher && !v.visible_env.empty())
      return {gpu(0), fmt::format("one GPU per rank: local rank {} takes cuda:0, the GPU its launcher ({}) left it "
                                  "(CUDA_VISIBLE_DEVICES={})",
                                  local_rank, v.launcher, v.visible_env.empty() ? "(unset)" : v.visible_env)};
    if (requested == "auto" && v.own_launcher)
      return {c10::Device(c10::kCPU),
              fmt::format("device \"auto\" runs on the CPU: this process sees {} for the {} ranks of this host, and "
                          "each rank needs a GPU of its own (set train.device = \"cuda:0\" with distributed.backend = "
                          "\"gloo\" to share one GPU, or start at most one rank per GPU)",
                          gpus(n), local_world_size)};
    throw Error(fmt::format("the GPUs are short: {}; each rank needs a GPU of its own{}.",
                            seen(local_rank, local_world_size, v),
                            n == 1 && v.visible_env.empty()
                                ? " (no launcher binding: every rank of this host sees the same GPU, which NCCL "
                                  "refuses to share)"
                                : ""),
                kBindingFix);
  }
  const c10::Device device(requested);  // "cuda:N": the config checks allow nothing else here
  if (device.index() >= n)
    throw Error(fmt::format("device \"{}\" does not exist; this process sees {} (CUDA_VISIBLE_DEVICES={}).", requested,
                            gpus(n), v.visible_env.empty() ? "(unset)" : v.visible_env),
                "Use an index below the device count, or \"cuda\" for one GPU per rank.");
  return {device, ""};
}

DeviceView device_view(const WorldInfo& world) {
  DeviceView v;
  v.visible_gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  v.own_launcher = world.launcher == "strata" || world.launcher == "none";
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  v.visible_env = visible != nullptr ? visible : "";
  v.launcher = world.launcher;
  v.local_rank_source = world.source;
  v.cuda_absent = cuda_support::why_absent();
  return v;
}

void check_shared_gpu(const std::string& requested, const std::string& backend, int local_world_size) {
  if (backend != "nccl" || local_world_size <= 1 || requested.rfind("cuda:", 0) != 0) return;
  throw Error(fmt::format("device \"{}\" puts all {} ranks of this host on one GPU, which NCCL refuses.", requested,
                          local_world_size),
              "Use device = \"cuda\" (one GPU per rank), or distributed.backend = \"gloo\" to share the GPU.");
}

}  // namespace strata
