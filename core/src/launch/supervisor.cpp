// The launcher's supervision of its ranks (launch/supervisor.hpp).

#include "launch/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "comm/job_monitor.hpp"
#include "device/host_memory.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "job/verdict.hpp"
#include "strata/errors.hpp"
#include "text/units.hpp"

namespace strata::launch {
namespace {

using Clock = std::chrono::steady_clock;

// Written only by signal handlers, read by the one running supervisor.
volatile std::sig_atomic_t g_signal_pipe_write = -1;
std::atomic<bool> g_supervising{false};

void on_signal(int sig) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(sig);
  // A full pipe already holds a wake-up; losing this byte only loses a duplicate.
  [[maybe_unused]] auto n = ::write(g_signal_pipe_write, &byte, 1);
  errno = saved;
}

/// The launcher's exit code for a child's wait status (0: success); prints how it ended unless
/// `quiet` (a job of one rank, whose cause paragraph says it).
int report_exit(int rank, int status, bool quiet) {
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    if (code != 0 && !quiet) std::fprintf(stderr, "strata: rank %d exited with status %d\n", rank, code);
    return code;
  }
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  if (!quiet) std::fprintf(stderr, "strata: rank %d was killed by signal %d (%s)\n", rank, sig, signal_name(sig).c_str());
  return 128 + sig;
}

/// Why a job failed, as the launcher names it.
struct Cause {
  int rank = -1;
  std::string how;  // "was killed by SIGSEGV", "exited with status 0 before its run ended", ...
  int signal = 0;   // the signal that ended or stopped it
  std::string phase;  // where it was, when known (its beacon or its record)
  std::optional<std::int64_t> step;
  std::string library;  // the plugin library a fatal signal came from
  std::string fix;
  bool own_record = false;  // its own failure record: the rank printed its error paragraph itself

  /// " in train at step 3, in libstrata_strategy_x.so"
  std::string where() const {
    std::string w;
    if (phase == "setup") w = " in setup";
    else if (!phase.empty()) w = " in " + phase + (step ? " at step " + std::to_string(*step) : std::string());
    if (!library.empty()) w += ", in " + library;
    return w;
  }
  /// The cause as a sentence; a cause without a rank (-1) is the job's as a whole.
  std::string text() const { return (rank >= 0 ? "rank " + std::to_string(rank) + " " : std::string()) + how + where(); }
};

/// What to do about a rank that died of `sig`.
std::string signal_fix(int sig, const std::string& library) {
  switch (sig) {
    case SIGKILL:
      return "SIGKILL comes from outside the rank, most often from the kernel's OOM killer (`dmesg | grep -i oom`, "
             "or the container's memory limit): use a smaller model, batch or fewer ranks per host, or give it more "
             "memory; else find who sent it";
    case SIGSEGV:
    case SIGBUS:
    case SIGILL:
    case SIGFPE:
    case SIGABRT:
      return "a crash in native code" + (library.empty() ? std::string() : " of " + library) +
             ": rerun it under gdb (`gdb -ex run --args strata run ...`, then `bt`) or with core dumps on (`ulimit -c "
             "unlimited`) to find the frame, and fix or report " +
             (library.empty() ? std::string("the plugin or library it is in") : std::string("that plugin"));
    default:
      return "the signal came from outside the job (a scheduler's time or memory limit, a user, a watchdog): find "
             "who sent it";
  }
}

/// Waits for the ranks; the first failure or a SIGINT/SIGTERM to the launcher stops the rest.
class Supervisor {
 public:
  /// `beacons`: the ranks' beacons (null: none); `single`: a job of one rank, whose own output
  /// says what a launcher's lines would repeat.
  Supervisor(std::vector<Child> children, std::chrono::seconds grace, const SignalPipe& signals,
             const RankBeacons* beacons, bool single)
      : children_(std::move(children)), grace_(grace), signals_(signals), beacons_(beacons), single_(single) {}
  /// Normally all children are reaped by run(); this covers an exception out of it.
  ~Supervisor() { kill_and_reap(children_); }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  int run() {
    while (alive() > 0) {
      reap();
      if (alive() == 0) break;
      for (int sig : signals_.wait(poll_timeout())) on_launcher_signal(sig);
      if (kill_at_ && !killed_ && Clock::now() >= *kill_at_) kill_all();
    }
    return result_.value_or(0);
  }
  /// A SIGKILL the launcher did not send: the OOM killer's when the cgroup level that limited the
  /// job at its start counted one more OOM kill since (v2's memory.events.local, else
  /// memory.events; v1's memory.oom_control), named with its limit; else the limit is named in
  /// the fix, where there is one.
  void explain_kill(Cause& why) const {
    // The level found at the start, its OOM kills read again from that very directory: the
    // tightest level by room left may be another one now (the killed rank's memory is freed).
    const auto level = memory_ ? memory_ : cgroup_memory_limit();
    if (!level) return;
    const std::string limit = gib(level->bytes) + " in " + level->file;
    const auto kills = memory_ && !memory_->dir.empty() ? cgroup_oom_kills(memory_->dir) : std::nullopt;
    if (memory_ && memory_->oom_kills >= 0 && kills && *kills > memory_->oom_kills) {
      why.how = fmt::format("was killed by the kernel's OOM killer (SIGKILL): its cgroup reached its memory limit ({})",
                            limit);
      why.fix = "the ranks of this host need more memory than the limit: use a smaller model or batch, fewer ranks "
                "per host, or a larger limit (the container's or the job's memory request)";
      return;
    }
    why.fix = signal_fix(SIGKILL, why.library) + fmt::format("; this process's cgroup limits memory to {}", limit);
  }

  /// Whether the launcher itself was told to stop (SIGINT, SIGTERM): no restart then.
  bool interrupted() const noexcept { return interrupted_; }

  /// The cause of a failed job: the rank that stopped, died of a signal, exited before its run
  /// ended, or raised first (its failure record), not the first rank to exit. Prints it as one
  /// paragraph and returns the job's exit code.
  /// `since`: records older than this (UNIX seconds) are an earlier run's.
  int name_cause(const std::filesystem::path& run_dir, int code, double since = 0) {
    auto records = run_dir.empty() ? std::vector<FailureRecord>{} : read_failure_records(run_dir);
    records.erase(std::remove_if(records.begin(), records.end(), [&](const auto& r) { return r.time < since; }),
                  records.end());
    const Child* cause = nullptr;
    Cause why;
    for (const auto& c : children_)  // stopped: its peers' failures follow from its silence
      if (c.stopped_by != 0 && cause == nullptr) {
        cause = &c;
        why.how = "was stopped by " + signal_name(c.stopped_by) + " and went silent";
        why.signal = c.stopped_by;
        why.fix = "a stopped rank holds up its peers: continue it (kill -CONT) or end it; raise [distributed] "
                  "heartbeat_s if ranks pause for longer on purpose";
        code = 128 + c.stopped_by;
      }
    for (const auto& c : children_)  // died of a signal the launcher did not send (OOM killer, ...)
      if (cause == nullptr && c.before_stop && c.status > 0 && WIFSIGNALED(c.status)) {
        cause = &c;
        why.signal = WTERMSIG(c.status);
        why.how = "was killed by " + signal_name(why.signal);
        code = 128 + why.signal;
        if (why.signal == SIGKILL) explain_kill(why);
      }
    for (const auto& c : children_)  // exited, even with status 0, before its run ended
      if (cause == nullptr && c.early) {
        cause = &c;
        why.how = "exited with status 0 before its run ended,";
        why.fix = "a plugin, or a library it calls, ended the process (exit(), _exit(), quick_exit()) while the job "
                  "ran; a plugin reports a failure by throwing strata::Error";
        code = 1;
      }
    if (cause == nullptr) {
      if (const auto record = cause_of(records)) {
        for (const auto& c : children_)
          if (c.rank == *record->cause_rank) cause = &c;
        why.how = record->rank == *record->cause_rank ? "failed: " + first_line(record->error)
                                                       : "(named by rank " + std::to_string(record->rank) +
                                                             "): " + first_line(record->error);
        why.phase = record->phase;
        why.step = record->step;
        why.own_record = record->rank == *record->cause_rank;
        why.fix = "the error paragraph of rank " + std::to_string(*record->cause_rank) + " above says what to fix";
        if (cause != nullptr && cause->status > 0 && WIFEXITED(cause->status) && WEXITSTATUS(cause->status) != 0)
          code = WEXITSTATUS(cause->status);
        if (cause == nullptr) {  // a rank of another node: no exit status here
          why.rank = *record->cause_rank;
          print(why);
          return code;
        }
      }
    }
    if (cause == nullptr) {
      // The hang watch's verdict where no rank was behind the others: the job's own, no rank to
      // blame (least of all rank 0, which found it and exited first).
      for (const auto& r : records)
        if (r.status == "failed" && !r.cause_rank && r.error.rfind(kJobHangVerdict, 0) == 0) {
          why.rank = -1;
          why.how = "the job hung: every rank was alive and at the same point (the same steps and collectives "
                    "issued), but none advanced";
          why.phase = r.phase;
          why.step = r.step;
          why.fix = "the collective every rank waits in does not complete (a link stalled, or the backend hangs): "
                    "rank 0's error paragraph above names each rank's last collectives; raise [distributed] "
                    "hang_timeout_s if a step legitimately issues no collective for that long";
          cause_ = why;
          print(why);
          return code;
        }
      for (const auto& c : children_)
        if (c.before_stop && c.status != 0 && cause == nullptr) cause = &c;
      if (cause == nullptr) return code;
      for (const auto& r : records)  // a rank signalled itself (not through the launcher): no failure
        if (r.rank == cause->rank && r.status == "interrupted") return code;
      why.how = c_status_text(cause->status);
      why.fix = "read the rank's output above";
      // Status 1 or 2: strata's own error exit, its paragraph printed by the rank.
      why.own_record = cause->status > 0 && WIFEXITED(cause->status) &&
                       (WEXITSTATUS(cause->status) == 1 || WEXITSTATUS(cause->status) == 2);
    }
    why.rank = cause->rank;
    if (const RankBeacon* b = beacons_ != nullptr ? beacons_->at(cause->local) : nullptr) {
      if (why.phase.empty()) {
        why.phase = beacon_phase_name(b->phase.load());
        why.step = b->step.load();
      }
      why.library.assign(b->library, ::strnlen(b->library, sizeof b->library));
    }
    if (why.fix.empty()) why.fix = signal_fix(why.signal, why.library);
    cause_ = why;
    print(why);
    return code;
  }
  /// The cause name_cause() found; rank -1 when none.
  const Cause& cause() const noexcept { return cause_; }
  /// Whether a rank opened the run directory (its beacon names it); true without beacons, where
  /// the launcher cannot tell. Ranks refused before that (a check only they run) leave it as it was.
  bool attached() const {
    if (beacons_ == nullptr) return true;
    for (const auto& c : children_)
      if (const RankBeacon* b = beacons_->at(c.local); b != nullptr && b->run_dir[0] != '\0') return true;
    return false;
  }
  /// Whether rank 0 (of this node's ranks) reported its run done (its own code returned); false
  /// without beacons.
  bool rank0_done() const {
    if (beacons_ == nullptr) return false;
    for (const auto& c : children_)
      if (const RankBeacon* b = c.rank == 0 ? beacons_->at(c.local) : nullptr; b != nullptr && b->done.load() != 0)
        return true;
    return false;
  }

 private:
  /// The cause as one paragraph; not for a job of one rank that printed its own error.
  void print(const Cause& why) const {
    if (single_ && why.own_record) return;
    const std::string text = "strata: cause: " + why.text() + "\n  fix: " + why.fix + "\n";
    std::fputs(text.c_str(), stderr);
  }

  int alive() const {
    int n = 0;
    for (const auto& c : children_) n += c.alive ? 1 : 0;
    return n;
  }

  /// Whether a rank that exited with status 0 had not finished its run (no beacon: it had).
  bool ended_early(const Child& c) const {
    const RankBeacon* b = beacons_ != nullptr ? beacons_->at(c.local) : nullptr;
    return b != nullptr && b->done.load() == 0;
  }

  void reap() {
    // Every rank that ended since the last look counts as ending before the stop: the order of
    // waitpid is not the order in which they ended.
    std::vector<Child*> ended;
    for (auto& c : children_) {
      if (!c.alive) continue;
      int status = 0;
      const pid_t r = ::waitpid(c.pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      if (r > 0 && WIFSTOPPED(status)) {
        // Not an end: its peers will notice its silence (heartbeat_s) and fail. Remember the
        // stop as the cause, unless the launcher is already stopping the ranks.
        if (!result_ && c.stopped_by == 0) {
          c.stopped_by = WSTOPSIG(status);
          c.before_stop = true;
          std::fprintf(stderr, "strata: rank %d was stopped by %s\n", c.rank, signal_name(c.stopped_by).c_str());
        }
        continue;
      }
      if (r > 0 && WIFCONTINUED(status)) {
        if (!result_ && c.stopped_by != 0) {  // resumed (fg after Ctrl-Z): no longer the cause of anything
          c.stopped_by = 0;
          c.before_stop = false;
        }
        continue;
      }
      c.alive = false;
      c.status = r > 0 ? status : -1;
      if (r < 0) c.status_lost_errno = errno;
      ended.push_back(&c);
    }
    if (result_) return;  // already stopping: later exits are consequences, not causes
    int code = 0;
    for (Child* c : ended) {
      c->before_stop = true;
      int own = 1;
      if (c->status < 0) {  // reaped elsewhere: the status is lost, which must not pass for success
        std::fprintf(stderr, "strata: rank %d vanished (waitpid: %s)\n", c->rank, std::strerror(c->status_lost_errno));
      } else {
        own = report_exit(c->rank, c->status, single_);
        if (own == 0 && ended_early(*c)) {
          c->early = true;
          own = 1;
          if (!single_) std::fprintf(stderr, "strata: rank %d exited with status 0 before its run ended\n", c->rank);
        }
      }
      if (code == 0) code = own;
    }
    if (code != 0) stop(code, SIGTERM, "strata: stopping the other ranks\n");
  }

  void on_launcher_signal(int sig) {
    if (sig == SIGCHLD) return;  // the next reap() handles it
    if (result_) {
      // A second interrupt while stopping: the user does not want to wait for the grace period.
      std::fprintf(stderr, "strata: received %s again, killing the ranks\n", signal_name(sig).c_str());
      kill_all();
      return;
    }
    if (!single_) std::fprintf(stderr, "strata: received %s, stopping the ranks\n", signal_name(sig).c_str());
    interrupted_ = true;
    // Forward the signal itself (a rank may handle SIGINT by stopping cleanly); SIGKILL follows
    // after the grace period.
    stop(128 + sig, sig, nullptr);
  }

  void stop(int code, int sig, const char* message) {
    result_ = code;
    kill_at_ = Clock::now() + grace_;
    if (alive() == 0) return;
    if (message != nullptr) std::fputs(message, stderr);
    signal_alive(children_, sig);
    signal_alive(children_, SIGCONT);  // a stopped rank takes the signal now, not when resumed
  }

  void kill_all() {
    signal_alive(children_, SIGKILL);
    killed_ = true;
  }

  std::chrono::milliseconds poll_timeout() const {
    // SIGCHLD wakes the poll; the cap is a safety net should the signal be consumed elsewhere.
    std::chrono::milliseconds timeout{200};
    if (kill_at_ && !killed_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - Clock::now());
      timeout = std::clamp(left, std::chrono::milliseconds{0}, timeout);
    }
    return timeout;
  }

  static std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }
  static std::string c_status_text(int status) {
    if (status < 0) return "vanished";
    if (WIFSIGNALED(status)) return "was killed by " + signal_name(WTERMSIG(status));
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }

  std::vector<Child> children_;
  Cause cause_;  // set by name_cause
  std::chrono::seconds grace_;
  const SignalPipe& signals_;
  const RankBeacons* beacons_;
  bool single_;
  std::optional<int> result_;                // exit code, set when stopping begins
  std::optional<Clock::time_point> kill_at_;  // when survivors get SIGKILL
  // The cgroup's memory limit and its OOM kills so far, to tell an OOM kill from another SIGKILL.
  std::optional<CgroupLimit> memory_ = cgroup_memory_limit();
  bool killed_ = false;
  bool interrupted_ = false;
};

/// summary.json when rank 0 could not write it (it died, or was stopped and killed): the status,
/// the cause and the exit code, so that a script can tell a crash from a run never started. A
/// summary rank 0 wrote stays; the launcher only adds the failed rank when rank 0 did not know it.
void write_launcher_verdict(const std::filesystem::path& run_dir, const Supervisor& supervisor, int code) {
  if (run_dir.empty() || !std::filesystem::is_directory(run_dir)) return;
  // No rank opened the run directory (refused by a check only the ranks run, e.g. a resume of a
  // finished run): it is not this attempt's, and what it says stands.
  if (!supervisor.attached()) return;
  const Cause& cause = supervisor.cause();
  const auto file = run_dir / "summary.json";
  try {
    Json summary = Json::object();
    if (std::filesystem::exists(file)) {
      std::ifstream in(file);
      std::stringstream text;
      text << in.rdbuf();
      summary = Json::parse(text.str());
      const Json* failed = summary.find("failed_rank");
      const bool known = failed != nullptr && failed->is_number();
      const bool failed_status = summary.find("status") && summary.find("status")->string_or("") == "failed";
      if (supervisor.interrupted() || cause.rank < 0) return;  // what rank 0 wrote stands
      // Rank 0 finished its run and said so: a failure after that (a crash in a static destructor,
      // a kill on the way out) does not undo the run.
      if (summary.find("status") && summary.find("status")->string_or("") == "ok" && supervisor.rank0_done()) return;
      if (failed_status && known && static_cast<int>(failed->number_or(-1)) != cause.rank) return;
      const Json* phase = summary.find("failed_phase");
      const bool placed = (phase != nullptr && !phase->is_null()) || cause.phase.empty();
      if (failed_status && known && cause.signal == 0 && placed) return;  // nothing to add
      if (!failed_status || !known) {
        // Rank 0 saw only the consequence: a collective that broke, or the launcher's SIGTERM
        // (sent because another rank failed) taken for an interruption. The cause replaces it.
        if (const Json* error = summary.find("error")) {
          const Json rank0_error = *error;
          summary["rank0_error"] = rank0_error;
        }
        summary["status"] = "failed";
        summary["error"] = cause.text();
      }
    } else {
      summary["status"] = supervisor.interrupted() ? "interrupted" : "failed";
      summary["error"] = supervisor.interrupted() ? "the launcher was interrupted (exit status " +
                                                        std::to_string(code) + ") before rank 0 wrote its summary"
                                                  : cause.text();
      summary["written_by"] = "launcher";
    }
    summary["failed_rank"] = cause.rank >= 0 ? Json(cause.rank) : Json();
    summary["signal"] = cause.signal != 0 ? Json(signal_name(cause.signal)) : Json();
    summary["exit_code"] = code;
    if (cause.rank >= 0) {  // where the failed rank was, as far as the launcher knows
      if (!cause.phase.empty()) summary["failed_phase"] = cause.phase;
      if (cause.step) summary["failed_step"] = *cause.step;
      summary["failed_plugin"] = cause.library.empty() ? Json() : Json(cause.library);
    }
    write_file_atomically(file, summary.dump() + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: could not write %s: %s\n", file.c_str(), e.what());
  }
}

}  // namespace

SignalPipe::SignalPipe() {
  if (g_supervising.exchange(true)) {
    throw Error("spawn_and_supervise is already running in this process",
                "Supervise one group of ranks at a time.");
  }
  if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_supervising = false;
    throw Error(std::string("cannot create the launcher's signal pipe: ") + std::strerror(errno));
  }
  g_signal_pipe_write = fds_[1];
  for (std::size_t i = 0; i < std::size(kSignals); ++i) {
    ::sigaction(kSignals[i], nullptr, &old_[i]);
    if (kSignals[i] != SIGCHLD && old_[i].sa_handler == SIG_IGN) continue;
    struct sigaction action {};
    action.sa_handler = on_signal;
    // SIGCHLD also for stopped children: a rank stopped by SIGSTOP is the cause of the failure
    // its peers will report. Our own SIGCHLD handler also overrides an inherited SIG_IGN, which
    // would otherwise make the kernel reap the children before waitpid could read their status.
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    ::sigaction(kSignals[i], &action, nullptr);
  }
}

SignalPipe::~SignalPipe() {
  for (std::size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  g_signal_pipe_write = -1;
  ::close(fds_[0]);
  ::close(fds_[1]);
  g_supervising = false;
}

std::vector<int> SignalPipe::wait(std::chrono::milliseconds timeout) const {
  pollfd p{fds_[0], POLLIN, 0};
  ::poll(&p, 1, static_cast<int>(timeout.count()));  // EINTR is fine: we drain and loop
  std::vector<int> signals;
  unsigned char buffer[64];
  ssize_t n = 0;
  while ((n = ::read(fds_[0], buffer, sizeof buffer)) > 0) signals.insert(signals.end(), buffer, buffer + n);
  return signals;
}

void signal_alive(const std::vector<Child>& children, int sig) {
  // Unreaped children keep their pid, so this never hits a recycled process.
  for (const auto& c : children) {
    if (c.alive) ::kill(c.pid, sig);
  }
}

void kill_and_reap(std::vector<Child>& children) {
  signal_alive(children, SIGKILL);
  for (auto& c : children) {
    while (c.alive && ::waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    c.alive = false;
  }
}

Supervision supervise(std::vector<Child> children, const SupervisionOptions& options) {
  Supervisor supervisor(std::move(children), options.grace, *options.signals, options.beacons, options.single);
  Supervision s;
  s.code = supervisor.run();
  s.interrupted = supervisor.interrupted();
  if (s.code == 0) return s;
  const std::filesystem::path run_dir = options.run_dir ? options.run_dir() : std::filesystem::path();
  if (!s.interrupted) s.code = supervisor.name_cause(run_dir, s.code, options.since);
  if (s.code != 0 && options.write_verdict) write_launcher_verdict(run_dir, supervisor, s.code);
  return s;
}

}  // namespace strata::launch
