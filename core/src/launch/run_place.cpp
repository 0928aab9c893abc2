#include "launch/run_place.hpp"

#include <cstdlib>

#include "strata/errors.hpp"
#include "train/checkpointing.hpp"

namespace strata {

namespace fs = std::filesystem;

int restart_count() {
  for (const char* name : {"STRATA_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::atoi(value);
  return 0;
}

RunPlace plan_run_place(const RunRequest& request, const Experiment& e, bool share) {
  RunPlace place;
  place.run_dir = request.out;
  place.restarts = restart_count();
  const bool automatic = request.resume == "auto";
  if (!request.resume.empty() && !automatic) {
    place.resume = resolve_resume(request.resume, e, {});
    if (place.run_dir.empty()) place.run_dir = saving_run_dir(*place.resume);
  }
  if (automatic && place.run_dir.empty())
    throw UsageError("--resume auto continues the run in --out DIR, but no --out was given.",
                     "Name the run directory: strata run EXP --out DIR --resume auto.");
  if (automatic) place.resume = resolve_resume("auto", e, place.run_dir);
  // A resumed run, or a launcher's restart of this rank (torchrun's), continues in its directory.
  place.use = share                                                   ? RunDirUse::kShare
              : !request.resume.empty() || place.restarts > 0 ? RunDirUse::kContinue
                                                                      : RunDirUse::kNew;
  return place;
}

RunPlace open_run_place(RunPlace place, const Experiment& e) {
  place.run_dir = make_run_directory(place.run_dir, e.experiment.out_dir, e.experiment.name, place.use);
  place.opened = true;
  return place;
}

}  // namespace strata
