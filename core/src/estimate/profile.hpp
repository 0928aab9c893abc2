#pragma once
// The profile `strata estimate` works from: a short run of the experiment on one device, read
// from its run directory (summary.json), with the model's units and their parameter counts.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "estimate/strategies.hpp"

namespace strata {
struct Experiment;
class Json;
}

namespace strata::estimate {

/// Reads RUN_DIR/summary.json of a finished run at world size 1: its steady step and the phases
/// of it, its model state and tensor peak, and how many threads it computed with. Throws
/// UsageError naming the directory when the run is not usable.
Profile read_profile(const std::filesystem::path& run_dir, const Experiment& experiment);

/// Gives `profile` the model's units (forward order). Measured unit times divide the profile's
/// step compute in their proportions; without them each unit's share of the parameters does
/// (forward one third, backward two thirds). Either way Profile::notes says which.
void attach_units(Profile& profile, std::vector<UnitProfile> units);

/// The units as JSON (estimate.json's profile.units, and units.json).
Json units_json(const std::vector<UnitProfile>& units);
/// RUN_DIR/units.json: the units as model_units() measured them on `device` for this profile run,
/// so that a profile taken on a GPU can be estimated from on a machine without one. Best effort.
void save_units(const std::filesystem::path& run_dir, const std::string& device, const std::vector<UnitProfile>& units);
/// The units saved beside the profile run on `device`, or nothing (none saved, another device, unreadable).
std::optional<std::vector<UnitProfile>> load_units(const std::filesystem::path& run_dir, const std::string& device);

/// How model_units() times the units: on `device` ("cpu", "cuda:0") with `threads` intra-op
/// threads on the CPU (0: as they are), `repeats` timed passes after one untimed.
struct UnitTiming {
  std::string device = "cpu";
  int threads = 0;
  int repeats = 5;
};

/// The model's units and their trainable parameter counts, by building the model as `run` would
/// (its dataset's shapes included). With `timing`, also each unit's forward and backward time on
/// one micro-batch of the training data and the activation bytes it holds from its forward to its
/// backward, without and with activation checkpointing (the medians of `repeats` passes, run unit by
/// unit: each unit's input cut from the graph so that its backward is timed alone; CUDA events on a
/// GPU, a host clock on the CPU; live bytes from the allocator `strata run` counts with). Throws
/// what building the model throws.
std::vector<UnitProfile> model_units(const Experiment& experiment, const UnitTiming* timing = nullptr);

}  // namespace strata::estimate
