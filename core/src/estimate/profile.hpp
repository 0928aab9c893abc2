#pragma once
// The profile `strata estimate` works from: a short run of the experiment on one device, read
// from its run directory (summary.json), with the model's units and their parameter counts.

#include <filesystem>
#include <vector>

#include "estimate/strategies.hpp"

namespace strata {
struct Experiment;
}

namespace strata::estimate {

/// Reads RUN_DIR/summary.json of a finished run at world size 1. `units` are the model's units
/// (names and parameter counts, forward order); without per-unit times in the summary the step's
/// compute is split by each unit's share of the parameters (noted in Profile::notes). Throws
/// UsageError naming the directory when the run is not usable.
Profile read_profile(const std::filesystem::path& run_dir, const Experiment& experiment, std::vector<UnitProfile> units);

/// The model's units and their trainable parameter counts, by building the model as `run` would
/// (its dataset's shapes included), without training. Throws what building them throws.
std::vector<UnitProfile> model_units(const Experiment& experiment);

}  // namespace strata::estimate
