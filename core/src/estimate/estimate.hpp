#pragma once
// `strata estimate EXPERIMENT --world-sizes 1,2,4,8`: every strategy's step time and memory per
// rank at each world size, predicted from one profiled run and a network description. Given a
// sweep file (`strata compare`'s), it estimates the sweep's base experiment with its [compare.set],
// over the sweep's strategies, world sizes, scaling and baseline unless the command line names them.

#include <filesystem>
#include <string>
#include <vector>

#include "strata/json.hpp"

namespace strata {

struct EstimateRequest {
  std::filesystem::path file;            ///< experiment TOML, or a sweep file
  std::vector<std::string> overrides;    ///< --set KEY=VALUE, for the experiment and its profile run (a sweep's as compare takes them)
  std::vector<int> world_sizes;          ///< empty: the sweep's, else 1, 2, 4, 8
  /// `bench comms --json` files (one per world size measured) or one TOML cluster spec; empty: an assumed one
  std::vector<std::filesystem::path> network;
  std::vector<std::string> strategies;   ///< empty: the sweep's, else the built-in ones
  std::filesystem::path out;             ///< estimate.json and estimate.csv (and the profile run); empty: runs/<name>/estimate-<UTC>
  std::filesystem::path profile;         ///< a run directory to reuse; empty: run a short profile
  double device_memory_gib = 0;          ///< memory of one device; 0: the host's for CPU runs, 80 GiB for GPUs (assumed)
  int profile_steps = 40;
  /// CPU: "equal" gives every rank (and the profile run) the same intra-op threads at every world
  /// size, the host's over the largest; "share" divides the host's among each world size's ranks;
  /// empty: a sweep's [compare] cpu_threads, else "equal". An experiment's [train] threads wins.
  std::string cpu_threads;
  /// > 0: the network's devices compute this many times as fast as the profile's (a CPU profile
  /// estimated for GPUs); required when the profile and the network are of different kinds.
  double compute_scale = 0;
};

/// Estimates, prints the table and writes estimate.json and estimate.csv; returns what
/// estimate.json holds. Throws UsageError (exit 2) for an unknown strategy, a bad network file or a
/// bad profile, Error (exit 1) when the profile run fails.
Json run_estimate(const EstimateRequest& request);

/// `strata estimate`: run_estimate(); returns the exit code (0).
int estimate_experiment(const EstimateRequest& request);

}  // namespace strata
