#pragma once
/// \file run_request.hpp
/// What `strata run` (and `validate`) is asked: the experiment file, the run directory, the
/// overrides, the checkpoint to continue from and the launcher flags, as the command line gives them.

#include <filesystem>
#include <string>
#include <vector>

namespace strata {

struct RunRequest {
  std::filesystem::path file;          ///< experiment TOML
  std::filesystem::path out;           ///< run directory; empty: <out_dir>/<name>/<UTC time>
  std::vector<std::string> overrides;  ///< "section.key=value"
  /// A checkpoint to continue from: a checkpoint directory, a directory of them or a run directory
  /// (its latest complete one), or "auto" (the latest in `out`, none: a fresh start); "" = none.
  std::string resume;
  /// `--nproc N` from the command line (0: not given). Under a launcher it must agree with the
  /// launcher's processes on this host; inside a Slurm allocation outside a step it is refused
  /// (the allocation's tasks are started by srun) unless `standalone`.
  int nproc = 0;
  /// `--standalone`: ignore launcher variables (Slurm, torchrun, OpenMPI, Kubeflow) and start the
  /// ranks on this host, as torchrun --standalone does.
  bool standalone = false;
  /// `strata validate --device NAME`: the fit check takes that named device's memory
  /// (device/named_devices.hpp), to check a GPU run from a machine without the GPU. "" = the device
  /// this host would run on.
  std::string device_name;
};

}  // namespace strata
