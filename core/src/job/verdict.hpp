#pragma once
// How a job ended, as the ranks and the launcher record it: every rank that
// fails leaves a failure record naming the rank it blames, so that the launcher (and rank 0, for
// summary.json) can name the cause of a failure rather than the first rank to notice it.

#include <atomic>
#include <cstdint>
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
  /// Where the blamed rank was: its phase ("setup", "train", "eval", "checkpoint", "end") and
  /// step (1-based, the one in progress or just done; 0 before the first); empty where unknown.
  std::string phase = {};
  std::optional<std::int64_t> step = {};

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

/// What a rank last said it was doing, in memory it shares with strata's launcher (a memfd the
/// rank inherits, kBeaconFdVariable): the launcher reads it when the rank died (a signal, the OOM
/// killer) or exited mid-run, to name its phase, step and the plugin library it crashed in.
struct RankBeacon {
  std::atomic<std::int64_t> step{0};  ///< 1-based step in progress (or just done); 0 before the first
  std::atomic<int> phase{0};          ///< index into beacon_phases()
  /// 1 once the rank's own code returned (its monitor ended); an exit before that, even with
  /// status 0 (a plugin that called exit()), is a failure of the job.
  std::atomic<int> done{0};
  char library[232] = {};             ///< the plugin library a fatal signal came from, set by the rank
  /// The run directory once the rank opened it (a job of one rank opens its own).
  char run_dir[4096] = {};
};

/// The variable that hands a rank the beacons' file descriptor (its slot: LOCAL_RANK).
inline constexpr const char* kBeaconFdVariable = "STRATA_BEACON_FD";

/// The phase names a beacon holds by index; an unknown name is stored as "setup".
int beacon_phase_index(const char* phase) noexcept;
const char* beacon_phase_name(int index) noexcept;

/// The launcher's beacons, one per local rank, in a memfd; empty (fd() < 0) where the kernel
/// offers none, and the verdicts then do without phase and step.
class RankBeacons {
 public:
  explicit RankBeacons(int ranks) noexcept;
  ~RankBeacons();
  RankBeacons(const RankBeacons&) = delete;
  RankBeacons& operator=(const RankBeacons&) = delete;
  int fd() const noexcept { return fd_; }
  /// Null when there are none.
  const RankBeacon* at(int local_rank) const noexcept;
  /// Zeroes every beacon (before each attempt of a restarted job).
  void reset() noexcept;
  /// The child of a fork: keeps the mapping (this process is the rank), closes the descriptor,
  /// and returns beacon `local_rank`.
  RankBeacon* keep_for_child(int local_rank) noexcept;
  /// The run directory beacon `local_rank` names; empty when none.
  std::filesystem::path run_dir(int local_rank) const;

 private:
  int fd_ = -1;
  int ranks_ = 0;
  RankBeacon* beacons_ = nullptr;
};

/// This process's beacon when strata's launcher started it (kBeaconFdVariable, LOCAL_RANK, or
/// adopt_rank_beacon() in a forked rank), mapped once; null otherwise.
RankBeacon* rank_beacon() noexcept;
void adopt_rank_beacon(RankBeacon* beacon) noexcept;

/// Makes a fatal signal of this process (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) write the
/// Strata plugin library it came from into `beacon` before the process dies of it as it would
/// have (signals the process already handles stay handled). Once per process.
void record_crash_library(RankBeacon* beacon) noexcept;

/// Seconds since the UNIX epoch (the wall clock: records of ranks on one host compare).
double unix_time_now();

}  // namespace strata
