#include "launch/run_place.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "strata/errors.hpp"
#include "train/checkpointing.hpp"

namespace strata {

namespace fs = std::filesystem;

int restart_count() {
  for (const char* name : {"STRATA_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::atoi(value);
  return 0;
}

RunPlace plan_run_place(const RunRequest& request, const Experiment& e, bool share, bool opens) {
  RunPlace place;
  place.run_dir = request.out;
  place.restarts = restart_count();
  const bool automatic = request.resume == "auto";
  bool continues = automatic;
  if (!request.resume.empty() && !automatic) {
    place.resume = resolve_resume(request.resume, e, {});
    // The run directory PATH names or lies in (a copy's own, even where its root is shared with
    // the original: check_checkpoint_root then refuses that root); else the checkpoint's.
    fs::path owner = enclosing_run_directory(request.resume);
    if (owner.empty()) owner = checkpoint_run_dir(*place.resume);
    if (place.run_dir.empty() && owner.empty())
      throw UsageError(fmt::format("checkpoint {} lies in no run directory (none of its parents holds a run's {}), so "
                                   "there is no run to continue.",
                                   place.resume->string(), kRunMarkerFile),
                       "Give the resumed run a directory with --out DIR (a new run from that checkpoint).");
    if (place.run_dir.empty()) place.run_dir = owner;
    std::error_code ec;
    continues = fs::equivalent(place.run_dir, owner, ec);
  }
  if (automatic && place.run_dir.empty())
    throw UsageError("--resume auto continues the run in --out DIR, but no --out was given.",
                     "Name the run directory: strata run EXP --out DIR --resume auto.");
  // A resumed run, or a launcher's restart of this rank (torchrun's), continues in its directory.
  place.use = share                               ? RunDirUse::kShare
              : continues || place.restarts > 0 ? RunDirUse::kContinue
                                                : RunDirUse::kNew;
  // The one live writer: a directory another process writes is refused before anything is read.
  std::error_code ec;
  // (A new run's directory is claimed by its marker, created exclusively, and locked once made.)
  if (opens && place.use == RunDirUse::kContinue && !launcher_holds_run_lock() && fs::is_directory(place.run_dir, ec))
    place.lock = lock_run_directory(place.run_dir);
  place.run_id = place.run_dir.empty() ? std::string() : run_id(place.run_dir);
  if (place.run_id.empty()) place.run_id = run_claim();
  // Before `auto` looks into the root: never another run's checkpoints. Only the process that opens
  // the run directory claims the root (and tells the other ranks what they resume).
  if (opens && !share && (saves_checkpoints(e) || automatic)) check_checkpoint_root(e, place.run_dir, place.run_id);
  if (automatic) place.resume = resolve_resume("auto", e, place.run_dir);
  return place;
}

RunPlace open_run_place(RunPlace place, const Experiment& e) {
  place.run_dir = make_run_directory(place.run_dir, e.experiment.out_dir, e.experiment.name, place.use);
  place.opened = true;
  if (place.use == RunDirUse::kShare) return place;
  if (!place.lock && !launcher_holds_run_lock()) place.lock = lock_run_directory(place.run_dir);
  if (place.lock) {
    place.lock->announce();
    if (place.use == RunDirUse::kContinue) remove_dead_temporaries(place.run_dir);
  }
  if (const auto marked = run_id(place.run_dir); !marked.empty()) place.run_id = marked;
  if (saves_checkpoints(e)) claim_checkpoint_root(e, place.run_dir, place.run_id);
  return place;
}

}  // namespace strata
