#pragma once
// What a rank needs before it trains, loaded and checked, writing nothing: the plugins, this
// rank's device and backend, the dataset, the model and the strategy, for a rank of `strata run`,
// for `strata validate` and for strata's launcher before it starts the ranks (run.cpp settles a
// run with it).

#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "config/experiment.hpp"
#include "job/world.hpp"
#include "plugin_loader.hpp"
#include "train/rank_run.hpp"

namespace strata {

/// Loads every plugin on the search path (plus the experiment's [plugins] paths) and returns the
/// libraries that did not load, each reported by a warning. A [plugins] paths entry that does not
/// exist is an error: the experiment asks for it (a STRATA_PLUGIN_PATH entry that does not exist
/// is only a warning).
std::vector<PluginLoadFailure> load_plugins(Registry& registry, const Experiment* experiment);

/// The process-group backend for `device`: [distributed] backend, "auto" meaning NCCL for CUDA
/// tensors and Gloo for CPU tensors.
std::string resolve_backend(const Experiment& e, const torch::Device& device);
/// LibTorch's intra-op threads for a CPU rank of `e` among `local_world_size` on its host:
/// [train] threads, else the host's cores shared among its ranks (oversubscribed threads slow
/// down badly); 0 for one rank alone, which keeps LibTorch's default.
int cpu_threads_per_rank(const Experiment& e, int local_world_size);

/// Bytes of a float32 parameter, as the host memory checks count a model.
constexpr double kFloat32Bytes = 4;

/// What prepare() is for: a run builds everything; validation builds a model only up to 1 GiB of
/// float32 parameters (a larger one is checked through its plugin's estimate),
/// so that `strata validate` stays quick and small whatever the options ask for.
enum class Purpose { kRun, kValidate };

/// Loads and validates everything a rank of `world` needs, before any training, writing nothing.
/// `resuming`: the model's values come from a checkpoint, not from [train] init_from.
std::unique_ptr<RankRun> prepare(Experiment experiment, const WorldInfo& world, Purpose purpose = Purpose::kRun,
                                 bool resuming = false, const std::string& device_name = "");

}  // namespace strata
