#pragma once
// The commands of the `strata` CLI, callable without it (the CLI only parses arguments).

#include <filesystem>
#include <string>
#include <vector>

#include "launch/run_request.hpp"

namespace strata {

struct Experiment;
class Registry;

/// `strata run`: trains the experiment and writes the run directory. As a rank of a job started
/// by a launcher (torchrun, srun, mpirun or strata itself) it joins that job; otherwise, for
/// [distributed] nproc > 1, it spawns and supervises the ranks on this host. Throws on failure;
/// returns the exit code (non-zero when a spawned rank failed).
int run_experiment(const RunRequest& request);
/// `strata validate`: every check of `run` that precedes training (plugins, options, data files).
void validate_experiment(const RunRequest& request);
/// `strata compare SWEEP`: every combination of the sweep as a real run below `out`, then
/// results.csv, results.json and results.md there.
struct CompareRequest {
  std::filesystem::path file;          ///< sweep TOML
  std::filesystem::path out;           ///< comparison directory; empty: runs/<sweep name>/<UTC time>
  std::vector<std::string> overrides;  ///< "section.key=value" applied to every run
  bool dry_run = false;                ///< validate and list the runs, start none
  /// --resume DIR: go on with the comparison in DIR (the same sweep and --set): runs that ended ok
  /// are kept, the others (failed, interrupted, not started) run again.
  std::filesystem::path resume;
  bool estimate = false;               ///< --estimate: predictions beside the measurements (accuracy.md)
  std::vector<std::filesystem::path> network;  ///< --network for the estimate; empty: estimate's assumed one
};
/// Returns the exit code: 0 when every run succeeded, 1 when some failed (each is recorded
/// with its error), 128 + signal when interrupted. Throws ConfigError for a bad sweep.
int compare_strategies(const CompareRequest& request);

/// `strata check NAME`: the conformance suite of the Strategy contract, on small CPU models.
struct CheckRequest {
  std::string strategy;                ///< registered strategy name
  std::string models = "standard";     ///< workload set: standard (MLP, CNN) or transformers (ViT, Llama)
  std::vector<int> world_sizes{1, 2};  ///< world sizes to check (those the strategy's placement
                                       ///< cannot run at are reported n/a)
  std::filesystem::path out;           ///< where its experiments and runs go (kept); empty: a fresh
                                       ///< directory under $TMPDIR, kept only when a check fails
  /// --set strategy.KEY=VALUE: options of every run of the strategy (and of the schedule it is held to).
  std::vector<std::string> sets;
  /// Also run the strategy's option matrix (StrategyTraits::option_matrix); off with --set.
  bool matrix = true;
};
/// Runs the strategy and `single` on the check's experiments and prints a table of the checks
/// (equivalence with `single`, memory, communication, state-dict round trip, bad options).
/// Returns 0 when every check passed, 1 when one failed, 128 + signal when interrupted; throws
/// UsageError or PluginError (exit 2) for an unknown strategy or unusable world sizes.
int check_strategy(const CheckRequest& request);

/// Everything `strata run` checks before training, for a loaded experiment at its
/// [distributed] nproc (used by compare to validate every combination first).
void check_experiment(const Experiment& experiment);
/// Loads the plugins of the search path and of the experiment's [plugins] paths.
void load_registry(Registry& registry, const Experiment* experiment);

/// `strata plugins`: a table of kind, name, description and library.
void list_plugins();
/// `strata describe NAME`: a plugin's (or a core section's) options with types, defaults and docs.
void describe(const std::string& name);

}  // namespace strata
