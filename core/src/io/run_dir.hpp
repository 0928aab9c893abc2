#pragma once
// Run directories and small file helpers.

#include <filesystem>
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
/// The current UTC time in strftime `format`, e.g. "%Y%m%dT%H%M%SZ" -> 20261121T193012Z.
std::string utc_time(const char* format);
/// Writes `text` to `file` atomically (write_file_atomically: temporary file, fsync, rename).
/// Throws strata::Error naming the file and the system's reason.
void write_text_file(const std::filesystem::path& file, const std::string& text);

}  // namespace strata
