#pragma once
// The profile an estimate stands on (estimate/profile_run.cpp): what is estimated, the profile run
// on one device (started now, or a given run directory), its reference runs until they agree, the
// model's units timed one by one, and the profile scaled to the network's kind of device.

#include <filesystem>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "estimate/estimate.hpp"
#include "estimate/network.hpp"
#include "estimate/strategies.hpp"
#include "strata/registry.hpp"

namespace strata::estimate_run {

/// What is estimated: an experiment, or the base experiment of a sweep with its [compare.set],
/// over the sweep's strategies and world sizes where the command line names none.
struct EstimateTarget {
  std::filesystem::path experiment;
  std::vector<std::string> overrides;  ///< for the experiment (and its profile run)
  /// --set strategy.KEY=VALUE (but strategy.name), as "KEY=VALUE": options of whichever estimated
  /// strategies have KEY, the experiment's own included.
  std::vector<std::string> strategy_sets;
  std::vector<std::string> strategies;
  std::vector<int> world_sizes;
  std::string scaling = "strong";
  std::string baseline_strategy;  ///< empty: the strategy that runs on one device, else the first
  /// The strategy that runs on one device: the profile run of a strategy that is not itself there.
  std::string one_device;
  int baseline_world = 1;
  std::string cpu_threads = "equal";  ///< --cpu-threads, else the sweep's [compare] cpu_threads
  std::vector<std::string> notes;
};

/// A strategy that runs a rank per device (or on one device) and whose schedule applies at world
/// size 1 is the one-device run at world size 1: its profile run is itself. Any other runs the
/// strategy that runs on one device.
bool profiles_as_itself(const Registry& registry, const Experiment& e);

/// A profile of one kind of device (cpu, gpu) and a network of another predict nothing real: the
/// compute must be scaled by a declared ratio (--compute-scale R: the network's devices R times as
/// fast), else UsageError; and a ratio without a difference is refused too. `device`: the
/// profile's ("cpu", "cuda:0").
void check_kinds(const std::string& device, const estimate::Network& net, double scale);

/// check_kinds(), then the profile's times divided by --compute-scale where the kinds differ.
void scale_to_network(estimate::Profile& p, const estimate::Network& net, double scale);

/// The profile: the run (RUN_DIR, or one started now), the model's units timed one by one, and on
/// the CPU a run for each thread count the ranks will use that differs from the run's. Throws
/// strata::Error when its reference runs contradict each other.
estimate::Profile measure_profile(const EstimateTarget& target, const EstimateRequest& r, const Experiment& e,
                                  bool own_ok, const estimate::Network& network, const std::filesystem::path& out);

}  // namespace strata::estimate_run
