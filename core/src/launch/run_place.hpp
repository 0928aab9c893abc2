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
#include <memory>
#include <optional>
#include <string>

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
  /// The run's identity (run_id(): the claim of its directory's marker, or this process's claim for a
  /// run that has none yet): what its checkpoint root and step directories are marked with.
  std::string run_id;
  /// The run directory's lock, held by the process that opened it for the whole run (null in the
  /// ranks of strata's launcher, which holds it, and before open_run_place).
  std::shared_ptr<RunDirLock> lock;
};

/// Decides where `request`'s run of `e` lives and what it resumes, writing nothing. `share`: a
/// node of a multi-node job whose rank 0 runs elsewhere (only creates the directory). `--resume
/// PATH` continues the run directory PATH lies in, as found on disk now (never the one the
/// checkpoint's metadata names); with `--out` elsewhere it starts a new run from that checkpoint.
/// Throws UsageError (exit 2) for a --resume that names no complete checkpoint, --resume auto
/// without --out, or a checkpoint in no run directory without --out; ConfigError for a checkpoint
/// root another run owns (check_checkpoint_root).
/// `opens`: this process will open the run directory (rank 0, or the launcher); it then takes the
/// directory's lock here, before it reads any checkpoint, so that a live run's directory is refused
/// first (UsageError, exit 2).
RunPlace plan_run_place(const RunRequest& request, const Experiment& e, bool share = false, bool opens = true);

/// Creates and claims the planned run directory (make_run_directory), takes its lock (unless strata's
/// launcher holds it for this rank) and claims its checkpoint root; returns the place with `run_dir`
/// set (a new run's <out_dir>/<name>/<UTC time> is named here). A directory another live process
/// writes is refused (UsageError, exit 2) before anything in it is written.
RunPlace open_run_place(RunPlace place, const Experiment& e);

/// The restart count the launcher gives its ranks (strata's or torchrun's), 0 when none.
int restart_count();

}  // namespace strata
