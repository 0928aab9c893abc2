#pragma once
/// \file run_checks.hpp
/// Checks `strata run` makes before the run directory is opened, besides the resume's own
/// (train/checkpointer.hpp check_resume): what would otherwise be refused only after the run
/// directory was written or training steps were spent.

#include "config/experiment.hpp"
#include "launch/run_place.hpp"
#include "job/world.hpp"
#include "strata/registry.hpp"

namespace strata {

struct RankRun;

/// The shard groups and sub-groups of a kit strategy's plan must divide the job's world (the kit's
/// mesh refuses them only in the strategy's setup); ConfigError (exit 2) at the group-size option.
void check_plan_fits_world(const Experiment& e, const Registry& registry, const WorldInfo& world);

/// A run that saves checkpoints needs a file system that holds at least the model's float32
/// values (the least a checkpoint writes); ConfigError (exit 2) otherwise.
void check_checkpoint_space(const RankRun& p, const RunPlace& place);

/// A resume whose checkpoint has done every step of a run that ended well: says so (rank 0) and
/// returns true; the run directory is left as it is (no segment of 0 steps). A restart, or a run
/// whose summary is not "ok" (it failed after its last checkpoint: in the final evaluation, the
/// final model, the summary), goes on to finish those.
bool nothing_left(const RunPlace& place, const Experiment& e, int rank);

}  // namespace strata
