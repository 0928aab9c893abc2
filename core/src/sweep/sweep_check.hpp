#pragma once
// A sweep validated whole without running anything: what `strata compare` does before its first
// run, and all that `strata validate SWEEP` does.

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "sweep/sweep.hpp"

namespace strata {

/// A sweep as `strata compare` runs it.
struct CheckedSweep {
  Sweep sweep;
  SweepPlan plan;
};

/// Reads the sweep `file` with the command line's `overrides` (parse_sweep()), expands it against
/// the plugins the base experiment finds (plan_sweep()) and validates every combination's
/// experiment (SweepPlan::combinations, whose `steps` it sets, and the runs') exactly as `strata
/// compare` runs it: the base experiment, then
/// [compare.set] and the command line's other overrides, then the axis values, each through
/// check_experiment() (every check of `strata run` before training). Calls `on_valid` after each
/// valid combination. Throws ConfigError naming the run, at the sweep entry or `--set` that breaks
/// it (a check that the base experiment's position would blame moves to the last of the run's
/// entries without which it passes).
CheckedSweep check_sweep(const std::filesystem::path& file, const std::vector<std::string>& overrides,
                         const std::function<void(const SweepRun&)>& on_valid = {});

/// `strata validate SWEEP [--set KEY=VALUE]...`: check_sweep(), with a line per combination.
void validate_sweep(const std::filesystem::path& file, const std::vector<std::string>& overrides);

struct Experiment;

/// Whether `e` computes on the CPU here ([train] device "cpu", or "auto" without a CUDA device).
bool computes_on_cpu(const Experiment& e);
/// The hardware threads of this host (at least 1).
int host_threads();
/// [compare] cpu_threads = "equal": the intra-op threads every rank gets when the widest run has
/// `widest_world` ranks on this host (the host's threads over them, at least 1). `strata estimate`
/// gives its ranks and its profile run the same.
int equal_rank_threads(int widest_world);

}  // namespace strata
