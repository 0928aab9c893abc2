#pragma once
/// \file run_place.hpp
/// Where a run lives and what it continues from, decided in one place before anything is
/// written: the run directory (given, the one that saved the resumed checkpoint, or a new
/// <out_dir>/<name>/<UTC time>), how it is taken (new, continued, shared by a node whose rank 0
/// runs elsewhere), the checkpoint to resume, and the launcher's restart count. plan_run_place()
/// only reads (checkpoint metadata, directories); open_run_place() creates and claims the
/// directory, once every check a resume can fail has passed (a refused resume leaves every byte
/// of an existing run directory as it was).

#include <filesystem>
#include <optional>

#include "config/experiment.hpp"
#include "io/run_dir.hpp"
#include "run.hpp"

namespace strata {

struct RunPlace {
  /// The run directory once known: --out, or the directory of the run that saved the resumed
  /// checkpoint; empty for a new run until open_run_place() names it.
  std::filesystem::path run_dir;
  RunDirUse use = RunDirUse::kNew;
  /// The checkpoint this run continues from, if any.
  std::optional<std::filesystem::path> resume;
  /// Restarts of this job so far (STRATA_RESTART_COUNT, or torchrun's TORCHELASTIC_RESTART_COUNT).
  int restarts = 0;
  /// Whether the directory was opened (created and claimed) by this process or its launcher.
  bool opened = false;
};

/// Decides where `request`'s run of `e` lives and what it resumes, writing nothing. `share`: a
/// node of a multi-node job whose rank 0 runs elsewhere (only creates the directory). Throws
/// UsageError (exit 2) for a --resume that names no complete checkpoint, --resume auto without
/// --out, or a resumed checkpoint whose run directory is gone.
RunPlace plan_run_place(const RunRequest& request, const Experiment& e, bool share = false);

/// Creates and claims the planned run directory (make_run_directory) and returns the place with
/// `run_dir` set (a new run's <out_dir>/<name>/<UTC time> is named here).
RunPlace open_run_place(RunPlace place, const Experiment& e);

/// The restart count the launcher gives its ranks (strata's or torchrun's), 0 when none.
int restart_count();

}  // namespace strata
