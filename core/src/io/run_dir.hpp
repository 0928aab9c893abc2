#pragma once
// Run directories and small file helpers.

#include <filesystem>
#include <memory>
#include <string>

namespace strata {

/// The file that marks a directory as a run's. The run that takes a directory creates it with
/// O_CREAT|O_EXCL, so of two runs given the same --out exactly one starts; it stays as the record
/// that the directory holds a run. It holds the claim (see run_claim), pid, host and start time.
inline constexpr const char* kRunMarkerFile = ".strata-run";
/// The variable in which strata's launcher hands its claim on the run directory to its ranks.
inline constexpr const char* kRunClaimVariable = "STRATA_RUN_CLAIM";

/// How a run takes its directory.
enum class RunDirUse {
  kNew,       ///< claim it: refused (UsageError) when another run holds it
  kContinue,  ///< a resumed or restarted run: reuse it, claimed or not
  kShare,     ///< only create it: a node of a multi-node job whose rank 0 runs elsewhere claims it
};

/// `out` when given, else <out_dir>/<name>/<UTC time, e.g. 20261121T193012Z> (a new directory:
/// `-1`, `-2`, ... is appended while the name is taken). The directory is created and, unless
/// kShare, claimed through kRunMarkerFile. An explicit `out` may exist (empty, or with files that
/// are not a run's); one that holds a run (the marker, or summary.json or TensorBoard events of
/// a run from before markers) is refused with "run directory DIR already holds a run" unless its
/// marker holds this process's own claim (strata's launcher claimed it for this rank) or `use`
/// is kContinue. Throws UsageError for a directory that cannot be created or is taken.
std::filesystem::path make_run_directory(const std::filesystem::path& out, const std::string& out_dir,
                                         const std::string& name, RunDirUse use = RunDirUse::kNew);
/// This process's claim on run directories: kRunClaimVariable when strata's launcher started this
/// rank (the launcher's claim), else a random token made once per process.
const std::string& run_claim();
/// The identity of the run in `dir`: its marker's claim (kept by every resume of the run, and by a
/// copy of its directory); empty when `dir` holds no marked run.
std::string run_id(const std::filesystem::path& dir);
/// The run directory that `path` lies in: `path` itself or its nearest ancestor holding a run's
/// marker, as found on disk now (a copied or moved run included); empty when there is none.
std::filesystem::path enclosing_run_directory(const std::filesystem::path& path);

/// The file whose advisory lock (flock) the one live writer of a run directory holds for the whole
/// run. It holds the holder's pid, host and start time, for the message of a refused writer. The
/// kernel drops the lock when its process ends, however it ends: a crashed run never blocks a resume.
inline constexpr const char* kRunLockFile = ".strata-lock";

/// The lock on a run directory; released when destroyed (or when its process ends).
class RunDirLock {
 public:
  explicit RunDirLock(int fd);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  /// Records this process (pid, host, start) in the lock file, for the message of a refused
  /// writer: once the run is sure to go on (a refused resume changes no byte, this file's included).
  void announce();

 private:
  int fd_ = -1;
};

/// In a fork of this process that runs a command of its own (launch/child.hpp): closes this
/// child's copies of the run-directory locks its parent holds (the parent's stay held), as an exec
/// would have, so that a run outliving its comparison does not hold the comparison's lock.
void run_dir_locks_closed_in_child() noexcept;

/// Takes the lock of run directory `dir` (which exists), writing nothing. Throws UsageError (exit
/// 2) naming the holder (pid, host, start) when another live process holds it.
std::unique_ptr<RunDirLock> lock_run_directory(const std::filesystem::path& dir);
/// Removes the temporary files (AtomicFile's ".NAME.<random>.tmp") writers of the run directory
/// `dir` left when they were killed; only its lock's holder calls it, before anything writes there.
void remove_dead_temporaries(const std::filesystem::path& dir);
/// Whether strata's launcher started this process as a rank of a job whose run directory it opened
/// and holds (STRATA_SPAWNED with a handed claim): the rank then takes no lock of its own.
bool launcher_holds_run_lock();

/// The current UTC time in strftime `format`, e.g. "%Y%m%dT%H%M%SZ" -> 20261121T193012Z.
std::string utc_time(const char* format);
/// Writes `text` to `file` atomically (write_file_atomically: temporary file, fsync, rename).
/// Throws strata::Error naming the file and the system's reason.
void write_text_file(const std::filesystem::path& file, const std::string& text);

}  // namespace strata
