#pragma once
/// \file device_choice.hpp
/// Which device a rank trains on, from `[train] device`, the rank's place on its host and the CUDA
/// devices this process can see. Pure: the device count is an argument, so every case is
/// unit-tested without a GPU (tests/unit/test_device_choice.cpp).
///
///   "cpu"     the CPU.
///   "auto"    cuda:LOCAL_RANK when every rank of this host gets a GPU of its own (at least as many
///             visible devices as local ranks); otherwise the CPU, with a note saying why (no CUDA
///             device, or fewer GPUs than ranks on this host: NCCL refuses two ranks on one GPU).
///   "cuda"    cuda:LOCAL_RANK; an error when this process sees no GPU, or fewer than the ranks
///             of its host.
///   "cuda:N"  that device (several ranks may share it over Gloo; NCCL refuses it, see
///             check_shared_gpu); an error when it does not exist.

#include <string>

#include <c10/core/Device.h>

namespace strata {

struct DeviceChoice {
  c10::Device device{c10::kCPU};
  /// Why "auto" chose the CPU on a host that has a GPU (worth a line in the log); empty otherwise.
  std::string note;
};

/// The device for `requested` ("auto", "cpu", "cuda" or "cuda:N", as the config checks allow) of
/// local rank `local_rank` among `local_world_size` ranks on this host, where this process sees
/// `visible_gpus` CUDA devices (0 without CUDA). Throws strata::Error (message and fix) when the
/// request cannot be met; the caller reports it at train.device.
DeviceChoice choose_device(const std::string& requested, int local_rank, int local_world_size, int visible_gpus);

/// NCCL refuses two ranks on one GPU (and reports it only once every rank has joined, or never);
/// `device` named by index while several ranks share this host is that case. Throws strata::Error
/// naming the device and the fix when `backend` is "nccl", `device` is an explicit CUDA index and
/// `local_world_size` > 1.
void check_shared_gpu(const std::string& requested, const std::string& backend, int local_world_size);

}  // namespace strata
