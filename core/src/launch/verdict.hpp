#pragma once
// How a job ended, as the ranks and the launcher record it (DESIGN §7 "status"): every rank that
// fails leaves a failure record naming the rank it blames, so that the launcher (and rank 0, for
// summary.json) can name the cause of a failure rather than the first rank to notice it.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/json.hpp"

namespace strata {

/// One rank's account of its end. Written to <run_dir>/failures/rank_<r>.json and published in
/// the job's store.
struct FailureRecord {
  int rank = 0;
  std::string status = "failed";  ///< "failed" or "interrupted"
  std::string error;              ///< the rank's error paragraph
  /// The rank this one blames: itself for an error of its own, a silent or lost peer, or none
  /// when its error is a consequence whose cause it does not know (a collective that failed).
  std::optional<int> cause_rank;
  double time = 0;                ///< when it happened, UNIX seconds

  Json to_json() const;
  /// Throws strata::Error when `json` is not a record.
  static FailureRecord from_json(const Json& json);
};

/// <run_dir>/failures/rank_<rank>.json
std::filesystem::path failure_record_path(const std::filesystem::path& run_dir, int rank);
/// Writes the record next to the run's outputs; never throws (a dying process reports what it can).
void write_failure_record(const std::filesystem::path& run_dir, const FailureRecord& record) noexcept;
/// Every readable record under run_dir/failures, by rank; unreadable files are skipped.
std::vector<FailureRecord> read_failure_records(const std::filesystem::path& run_dir);
/// Removes the records of an earlier attempt (a restarted job starts without them).
void clear_failure_records(const std::filesystem::path& run_dir) noexcept;

/// The record that names the cause of a job's failure: the earliest record of an error of a
/// rank's own, else the earliest one that blames another rank; std::nullopt when every record is
/// a consequence without a known cause.
std::optional<FailureRecord> cause_of(const std::vector<FailureRecord>& records);

/// "SIGKILL" for 9, "signal 64" for a number without a name.
std::string signal_name(int signal);

/// Seconds since the UNIX epoch (the wall clock: records of ranks on one host compare).
double unix_time_now();

}  // namespace strata
