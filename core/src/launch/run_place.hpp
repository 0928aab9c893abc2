#pragma once
/// \file run_place.hpp
/// Where a run lives and what it continues from, decided in one place before anything is
/// written: the run directory (given, the one that saved the resumed checkpoint, or a new
/// <out_dir>/<name>/<UTC time>), how it is taken (new, continued, shared by a node whose rank 0
/// runs elsewhere), the checkpoint to resume (resolve_resume) and the run it belongs to, the
/// checkpoint root and its one owner, and the launcher's restart count. plan_run_place()
/// only reads (checkpoint metadata, directories); open_run_place() creates and claims the
/// directory, once every check a resume can fail has passed (a refused resume leaves every byte
/// of an existing run directory as it was).

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "config/experiment.hpp"
#include "io/run_dir.hpp"
#include "launch/run_request.hpp"

namespace strata {

/// The checkpoint root of a run: [checkpoint] dir, relative to the run directory; default
/// <run>/checkpoints.
std::filesystem::path checkpoint_root(const Experiment& e, const std::filesystem::path& run_dir);

/// A checkpoint root has one owner: the run whose id (run_id(), its marker's claim) and directory
/// its file kRootOwnerFile records. A run removes only the step_* directories it wrote, and never
/// writes into, or resumes `auto` from, a root another run owns.
inline constexpr const char* kRootOwnerFile = ".strata-owner";

/// Refuses (ConfigError at checkpoint.dir, exit 2, naming the owner and the fix) a checkpoint root
/// this run may not write: one another run owns, one holding checkpoints of no known owner outside
/// this run's directory, or one this process cannot create or write. Reads only. `run_dir` may be
/// empty for a new run whose directory is not named yet (its relative root is then new, unchecked).
void check_checkpoint_root(const Experiment& e, const std::filesystem::path& run_dir, const std::string& run_id);
/// Marks this run's checkpoint root as its own (created exclusively; a copied or moved run records
/// its new directory in its own root). Throws as check_checkpoint_root when another run won it.
void claim_checkpoint_root(const Experiment& e, const std::filesystem::path& run_dir, const std::string& run_id);
/// Whether the run saves checkpoints at all.
bool saves_checkpoints(const Experiment& e);

/// The checkpoint that `resume` names:
///  - "auto": the latest complete one under this run's root; else the one STRATA_RESUME_FALLBACK
///    names (set by the launcher when it restarts a run started with --resume PATH); else none;
///  - a checkpoint directory (step_N with its metadata.json);
///  - a directory of step_N checkpoints, or a run directory (its checkpoint root under `e`, or its
///    checkpoints/): its latest complete one.
/// Throws UsageError (exit 2) when the path holds none, or names an incomplete one.
std::optional<std::filesystem::path> resolve_resume(const std::string& resume, const Experiment& e,
                                                    const std::filesystem::path& run_dir);

/// The run directory `checkpoint` belongs to, as found on disk now: the run directory it lies in (a
/// copied or moved run's own), else the directory its root's owner records while that still holds
/// the same run; empty when neither. Never the directory the checkpoint's metadata names.
std::filesystem::path checkpoint_run_dir(const std::filesystem::path& checkpoint);

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
