#pragma once
/// \file device_choice.hpp
/// Which device a rank trains on, from `[train] device`, the rank's place on its host, the CUDA
/// devices this process can see and who started it. Pure: what CUDA shows is an argument, so
/// every case is unit-tested without a GPU (tests/unit/test_device_choice.cpp).
///
/// A rank follows what its launcher lets it see:
///   - as many visible GPUs as ranks on the host: cuda:LOCAL_RANK (every rank sees them all);
///   - one visible GPU per rank, under a launcher that binds GPUs to tasks (Slurm's
///     --gpus-per-task / --gpu-bind, a per-rank CUDA_VISIBLE_DEVICES from torchrun, mpirun or a
///     wrapper script): cuda:0, which is that rank's own GPU. Binding sets CUDA_VISIBLE_DEVICES;
///     with it unset, the one GPU is the host's and every rank would take it (NCCL's "Duplicate
///     GPU", found only at its first collective): the GPUs are short;
///   - otherwise the GPUs are short: an error naming CUDA_VISIBLE_DEVICES, the local rank and the
///     launcher, except for "auto" among ranks that strata started itself (they all see the same
///     devices), which runs on the CPU with a note (NCCL refuses two ranks on one GPU).
///
///   "cpu"     the CPU.
///   "auto"    the GPU the rules above give; the CPU where there is none (or, for strata's own
///             ranks, too few), with a note then.
///   "cuda"    the GPU the rules above give; an error where there is none.
///   "cuda:N"  that device (several ranks may share it over Gloo; NCCL refuses it, see
///             check_shared_gpu); an error when it does not exist.

#include <string>

#include <c10/core/Device.h>

namespace strata {

/// What a rank sees of the host's GPUs.
struct DeviceView {
  int visible_gpus = 0;  ///< CUDA devices this process sees (0 without CUDA)
  /// True when strata started this host's ranks itself (or there is one process): every rank then
  /// sees the same devices, and one visible GPU is shared by all of them.
  bool own_launcher = true;
  std::string visible_env;  ///< CUDA_VISIBLE_DEVICES as set, "(unset)" when not, for messages
  std::string launcher;     ///< "torchrun", "slurm", "openmpi", "strata" or "none", for messages
  std::string local_rank_source;  ///< the variable the local rank came from ("SLURM_LOCALID=1"), for messages
  std::string cuda_absent;  ///< why LibTorch's CUDA library is not loaded (device/cuda_support.hpp), "" when it is
};

struct DeviceChoice {
  c10::Device device{c10::kCPU};
  /// Why "auto" chose the CPU on a host that has a GPU, or which binding a GPU came from (worth a
  /// line in the log); empty otherwise.
  std::string note;
};

/// The device for `requested` ("auto", "cpu", "cuda" or "cuda:N", as the config checks allow) of
/// local rank `local_rank` among `local_world_size` ranks on this host. Throws strata::Error
/// (message and fix) when the request cannot be met; the caller reports it at train.device.
DeviceChoice choose_device(const std::string& requested, int local_rank, int local_world_size, const DeviceView& view);

/// What this process sees of the GPUs (CUDA's device count, CUDA_VISIBLE_DEVICES) as a rank of
/// `world`.
DeviceView device_view(const struct WorldInfo& world);

/// NCCL refuses two ranks on one GPU (and reports it only once every rank has joined, or never);
/// `device` named by index while several ranks share this host is that case. Throws strata::Error
/// naming the device and the fix when `backend` is "nccl", `device` is an explicit CUDA index and
/// `local_world_size` > 1.
void check_shared_gpu(const std::string& requested, const std::string& backend, int local_world_size);

}  // namespace strata
