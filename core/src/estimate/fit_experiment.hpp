#pragma once
// What the estimate module reads from an experiment and the registry: a strategy's plan with the
// experiment's [strategy] options (`strata estimate` and the fit check both), and the fit check of
// `strata validate` / `strata run` from an experiment.

#include <optional>
#include <string>

#include <torch/types.h>

#include "device/host_memory.hpp"
#include "estimate/strategies.hpp"
#include "job/world.hpp"
#include "strata/registry.hpp"

namespace strata {
struct Experiment;
}

namespace strata::estimate {

/// Strategy `name` of `registry`: with the experiment's [strategy] options when it is the
/// experiment's strategy, its defaults otherwise (strategy_model).
StrategyModel experiment_strategy_model(const Experiment& e, const Registry& registry, const std::string& name);
/// The strategies the fit check proposes at `world` ranks: every registered strategy that declares
/// a schedule and runs a rank per device (and at world size 1, those on one device).
std::vector<std::string> fit_candidates(const Registry& registry, int world);

/// What the fit check says of a run ([train] fit_check): the line validate prints, and a warning
/// where the prediction exceeds the device within the estimate's uncertainty (or beyond it under
/// fit_check = "warn").
struct FitOutcome {
  std::string line;
  std::string warning;
};

/// The strategy's memory per rank (fit.hpp: model state by its sharding, activations of this
/// rank's micro-batch from [train] memory_profile's measurements, else from the model's memory
/// estimate, gathered units and communication buffers) against the device a rank uses:
/// `device_name`'s memory where given (a named device: `strata validate --device`), else the GPU's
/// total memory, or on the CPU `host_available` (the memory this run may take: the host's, bounded
/// by its cgroup's limit and a Slurm allocation; device/host_memory.hpp) shared by this host's
/// ranks. Under [train] fit_check = "error" a prediction beyond the device by more than the
/// estimate's uncertainty (5% measured, 25% from a formula) is a config error at strategy.name
/// naming the figure, its source, what would fit and the override; "warn" makes that a warning,
/// "off" skips the check (empty outcome).
/// `sample_shape`: one example's input shape in this experiment (the dataset's), which a
/// [train] memory_profile measured at another length scales to.
FitOutcome check_strategy_fits(const Experiment& e, const Registry& registry, const WorldInfo& world,
                               const torch::Device& device, double parameters,
                               const std::optional<ModelMemoryEstimate>& memory,
                               const std::optional<HostMemory>& host_available, const std::string& device_name = "",
                               const std::vector<std::int64_t>& sample_shape = {});

}  // namespace strata::estimate
