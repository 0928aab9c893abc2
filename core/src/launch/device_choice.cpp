#include "launch/device_choice.hpp"

#include <fmt/format.h>

#include "strata/errors.hpp"

namespace strata {

namespace {

c10::Device gpu(int index) { return {c10::kCUDA, static_cast<c10::DeviceIndex>(index)}; }

std::string gpus(int n) { return fmt::format("{} CUDA device{}", n, n == 1 ? "" : "s"); }

}  // namespace

DeviceChoice choose_device(const std::string& requested, int local_rank, int local_world_size, int visible_gpus) {
  if (requested == "cpu") return {};
  if (requested == "auto") {
    if (visible_gpus <= 0) return {};
    if (visible_gpus >= local_world_size) return {gpu(local_rank), ""};
    return {c10::Device(c10::kCPU),
            fmt::format("device \"auto\" runs on the CPU: this process sees {} for the {} ranks of this host, and "
                        "each rank needs a GPU of its own (set train.device = \"cuda:0\" with distributed.backend = "
                        "\"gloo\" to share one GPU, or start at most one rank per GPU)",
                        gpus(visible_gpus), local_world_size)};
  }
  if (visible_gpus <= 0)
    throw Error("device \"" + requested + "\" was requested but this process sees no CUDA device.",
                "Use device = \"cpu\" or \"auto\", or run on a machine with a GPU (and check CUDA_VISIBLE_DEVICES).");
  if (requested == "cuda") {
    if (local_rank >= visible_gpus)
      throw Error(fmt::format("local rank {} needs a GPU of its own, but this process sees {} for the {} ranks of this "
                              "host.",
                              local_rank, gpus(visible_gpus), local_world_size),
                  "Start at most one rank per GPU on each host, or use device = \"auto\" (the CPU when GPUs are "
                  "short).");
    return {gpu(local_rank), ""};
  }
  const c10::Device device(requested);  // "cuda:N": the config checks allow nothing else here
  if (device.index() >= visible_gpus)
    throw Error(fmt::format("device \"{}\" does not exist; this process sees {}.", requested, gpus(visible_gpus)),
                "Use an index below the device count, or \"cuda\" for one GPU per rank.");
  return {device, ""};
}

void check_shared_gpu(const std::string& requested, const std::string& backend, int local_world_size) {
  if (backend != "nccl" || local_world_size <= 1 || requested.rfind("cuda:", 0) != 0) return;
  throw Error(fmt::format("device \"{}\" puts all {} ranks of this host on one GPU, which NCCL refuses.", requested,
                          local_world_size),
              "Use device = \"cuda\" (one GPU per rank), or distributed.backend = \"gloo\" to share the GPU.");
}

}  // namespace strata
