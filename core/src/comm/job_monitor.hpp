#pragma once
// A rank's watch over its job: a heartbeat published in the job's store,
// so that a rank that stops (SIGSTOP, a lost link, a dead host) ends the whole job within
// [distributed] heartbeat_s naming it, instead of after the collective timeout; and this rank's
// own ending: SIGINT/SIGTERM become a stop at the next step boundary (status "interrupted"), and
// every failure leaves a record naming the rank it blames.
//
// Gloo's collectives cannot be aborted, so when the training thread is stuck in one (its peer is
// gone) the monitor writes the verdict itself, from what the trainer registered, and exits the
// process; the launcher (or the peers' monitors) then end the rest of the job.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <thread>

#include "io/json.hpp"
#include "job/verdict.hpp"
#include "strata/errors.hpp"

namespace strata {

/// A connection of its own to the job's store, for a thread other than training's. Any process
/// that reaches the store may write there: values carry the seal of the job's secret where the
/// job has one, and a value without it is not the job's.
class JobStore {
 public:
  virtual ~JobStore() = default;
  /// Sets `key` to `value`, sealed.
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// The value of `key`; std::nullopt when it is not set or not sealed by the job (does not wait).
  virtual std::optional<std::string> get_if_set(const std::string& key) = 0;
  /// What `key` holds, sealed or not ("" when unset): for liveness, where any change counts.
  virtual std::string stored(const std::string& key) = 0;
  /// Whether every one of `keys` is set.
  virtual bool all_set(const std::vector<std::string>& keys) = 0;
};

/// This rank was asked to stop (SIGINT, SIGTERM, SIGHUP): exit status 128 + signal.
class Interrupted : public Error {
 public:
  Interrupted(int signal, const std::string& where)
      : Error("interrupted by " + signal_name(signal) + " " + where), signal_(signal) {}
  int exit_code() const noexcept override { return 128 + signal_; }
  int signal() const noexcept { return signal_; }

 private:
  int signal_;
};

/// How the hang watch's verdict begins: where no rank is behind the others it blames none
/// (cause_rank unset), and the launcher names the hang as the job's by this opening.
inline constexpr const char* kJobHangVerdict = "a collective hangs";

struct JobMonitorOptions {
  int rank = 0;
  int world_size = 1;
  /// A rank silent this long ends the job; 0: no heartbeat (signals and records only).
  std::chrono::milliseconds heartbeat{30000};
  /// After SIGINT/SIGTERM the training thread has this long to stop at a step boundary (it may be
  /// waiting for a peer that already stopped) before the monitor writes the verdict and exits.
  std::chrono::milliseconds stop_grace{5000};
  /// Rank 0 ends the job with a verdict when every rank is alive but none has advanced (no step,
  /// no collective issued) for this long while training or evaluating: a collective hangs. It is
  /// below the collective timeout, so the verdict comes before c10d aborts; 0: not watched.
  std::chrono::milliseconds hang{0};
};

/// What a rank has done, for the hang watch: collectives it has issued so far (every
/// communicator) and, per communicator by name, the last one ("all_reduce #37 of 2048 bytes").
struct JobProgress {
  std::int64_t issued = 0;
  std::vector<std::pair<std::string, std::string>> last;  ///< (communicator, its last collective)
};

class JobMonitor {
 public:
  /// Installs the SIGINT/SIGTERM/SIGHUP handlers (signals the process ignores stay ignored) and
  /// starts the monitor thread. One monitor per process.
  explicit JobMonitor(JobMonitorOptions options);
  ~JobMonitor();
  JobMonitor(const JobMonitor&) = delete;
  JobMonitor& operator=(const JobMonitor&) = delete;

  /// Starts the heartbeat over `store` (null: none, a job of one process) and names the run
  /// directory that failure records go to; `endpoint` ("addr:port") names the store in messages.
  void attach(std::shared_ptr<JobStore> store, std::filesystem::path run_dir, std::string endpoint);
  /// The signal that asked this rank to stop, 0 if none. The trainer checks it between steps.
  int stop_signal() const noexcept { return stop_signal_.load(); }
  /// Steps done so far, for a verdict the monitor writes (and the launcher's beacon).
  void note_step(std::int64_t step) noexcept {
    step_.store(step);
    if (beacon_ != nullptr) beacon_->step.store(step + 1, std::memory_order_relaxed);
  }
  /// What the training thread is doing: "setup", "train", "eval", "checkpoint" or "end". Only
  /// "train" and "eval" are watched for hangs (a save waits for rank 0 through the store).
  void note_phase(const char* phase) noexcept {
    phase_.store(phase);
    if (beacon_ != nullptr) beacon_->phase.store(beacon_phase_index(phase), std::memory_order_relaxed);
  }
  /// Where the hang watch reads this rank's collectives (called from the heartbeat thread; must
  /// stay valid until attach()'s threads stop, or be reset to null first).
  void set_progress_source(std::function<JobProgress()> source);
  /// c10d's flight recorder of this rank's backend: `in_flight` lists the collectives it holds as
  /// not completed (read for the hang watch's report when this rank has stopped advancing), `dump`
  /// writes its record beside the verdict when this monitor ends the job. Either may be null.
  void set_flight_recorder(std::function<std::vector<std::string>()> in_flight, std::function<void()> dump);
  std::int64_t step() const noexcept { return step_.load(); }
  /// What writes the verdict when the training thread cannot (called from the monitor's thread;
  /// must only touch thread-safe state). Null: nothing to write. Returns after any call in flight.
  void set_verdict_writer(std::function<void(const FailureRecord&)> writer);
  /// The training thread's failure, as the job's verdict: records it (file and store) and returns
  /// the status ("failed"/"interrupted"), the error paragraph and the rank to blame, which is
  /// another rank when this one only saw the consequence (a collective that failed).
  FailureRecord record_failure(const std::exception& error);
  /// Ends the process with `error` (exit 1) unless clear_deadline() comes within `limit`: the
  /// rendezvous, whose Gloo connection retries c10d does not bound by its timeout.
  void set_deadline(std::chrono::milliseconds limit, std::string error, std::string fix);
  void clear_deadline();
  /// Training is over (the final barrier follows): silence of peers is no longer a failure.
  void finished() noexcept { finished_ = true; }

 private:
  void monitor_loop();
  void heartbeat_loop();
  /// Writes the verdict and the record, prints the error and exits the process with `code`.
  [[noreturn]] void fatal(const FailureRecord& verdict, int code, const std::string& fix);
  /// Writes c10d's flight record of this rank (set_flight_recorder's dump), once.
  void dump_flight_record();
  /// This rank's progress, as the heartbeat publishes it ("pg/<rank>"), with the beat's number.
  Json progress_json(std::int64_t beat);
  /// Rank 0: reads every rank's progress; ends the job when none has advanced for options_.hang
  /// while all of them train or evaluate, blaming the rank furthest behind (none when they are
  /// tied: the hang is the job's). `seen` and
  /// `advanced` carry over between beats, and `fresh` (each rank's last beat number and when it
  /// rose): a report whose number stops rising is an old one written again, by a stranger, and
  /// suspends the watch.
  void watch_hang(std::vector<std::string>& seen, std::chrono::steady_clock::time_point& advanced,
                  std::vector<std::pair<std::int64_t, std::chrono::steady_clock::time_point>>& fresh);
  /// A job of one process (no store): the same watch over this rank alone, from the monitor's
  /// thread, in "train" only (its progress is the step counter alone: an evaluation, a save or
  /// setup restarts the clock). `seen` and `advanced` carry over between calls.
  void watch_own_hang(std::int64_t& seen, std::chrono::steady_clock::time_point& advanced);
  /// This rank's phase and step (1-based, as a verdict names them).
  void note_where(FailureRecord& record) const;
  /// Writes the record next to the outputs and, for at most a second, to the store; returns
  /// whether the store took it.
  bool publish(const FailureRecord& record) noexcept;
  std::vector<FailureRecord> published_records();

  JobMonitorOptions options_;
  std::shared_ptr<JobStore> store_;
  std::filesystem::path run_dir_;
  std::string endpoint_;
  std::atomic<int> stop_signal_{0};
  std::atomic<std::int64_t> step_{0};
  std::atomic<const char*> phase_{"setup"};
  RankBeacon* beacon_ = nullptr;  // shared with strata's launcher, when it started this rank
  std::mutex progress_mutex_;
  std::function<JobProgress()> progress_;
  std::function<std::vector<std::string>()> in_flight_;  // under progress_mutex_
  std::function<void()> dump_trace_;                     // under writer_mutex_
  bool trace_dumped_ = false;                            // under writer_mutex_
  std::int64_t last_advance_ = -1;                       // the heartbeat thread's last report
  std::atomic<bool> finished_{false};
  std::atomic<bool> failing_{false};             // the training thread handles a failure
  std::atomic<std::int64_t> last_beat_ns_{0};   // steady clock of the last heartbeat the store took
  std::atomic<bool> stopping_threads_{false};
  std::mutex deadline_mutex_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::string deadline_error_, deadline_fix_;
  std::mutex writer_mutex_;
  std::function<void(const FailureRecord&)> writer_;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::thread monitor_;
  std::thread heartbeat_;
};

}  // namespace strata
