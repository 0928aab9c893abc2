#pragma once
// The profile `strata estimate` works from: a short run of the experiment on one device, read
// from its run directory (summary.json), with the model's units and their parameter counts.

#include <filesystem>
#include <string>
#include <vector>

#include "estimate/strategies.hpp"

namespace strata {
struct Experiment;
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
