// strata's single-host launcher: fork/exec N copies of this program with torchrun-style
// variables, then supervise them like torchrun's elastic agent does (first failure stops all).
//
// Signals reach the supervisor through a self-pipe written by sigaction handlers rather than
// through sigwait/signalfd: those need the signals blocked in *every* thread, and the host may
// already run LibTorch or test-framework threads that we do not control. A handler runs in
// whichever thread receives the signal, so the pipe sees it either way.

#include "launch/spawn.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "device/host_memory.hpp"
#include "comm/job_guard.hpp"
#include "comm/job_monitor.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "job/verdict.hpp"
#include "strata/errors.hpp"
#include "text/units.hpp"

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

/// Exit status of a child that could not become a rank (exec failed); 127 as in shells.
constexpr int kExecFailed = 127;

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

/// Installs the SIGINT/SIGTERM/SIGCHLD handlers and the self-pipe for one supervision, and puts
/// everything back on destruction. Signals the host ignores (SIGINT under `nohup` or `cmd &`)
/// stay ignored.
class SignalPipe {
 public:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGCHLD};

  SignalPipe() {
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
  ~SignalPipe() {
    for (std::size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    g_signal_pipe_write = -1;
    ::close(fds_[0]);
    ::close(fds_[1]);
    g_supervising = false;
  }
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  /// Waits up to `timeout` for a signal; returns those received (SIGCHLD included).
  std::vector<int> wait(std::chrono::milliseconds timeout) const {
    pollfd p{fds_[0], POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(timeout.count()));  // EINTR is fine: we drain and loop
    std::vector<int> signals;
    unsigned char buffer[64];
    ssize_t n = 0;
    while ((n = ::read(fds_[0], buffer, sizeof buffer)) > 0) signals.insert(signals.end(), buffer, buffer + n);
    return signals;
  }
  /// The dispositions before ours, for the children to restore before exec.
  const struct sigaction& old_action(std::size_t i) const { return old_[i]; }

 private:
  int fds_[2] = {-1, -1};
  struct sigaction old_[std::size(kSignals)] {};
};

/// argv and envp of one child, built before fork: after fork only async-signal-safe calls are
/// allowed (another thread may hold the allocator's lock).
struct ChildPlan {
  std::vector<std::string> strings;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

std::string program_path() {
  char buffer[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  return n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : std::string("strata");
}

/// 128 random bits in hex; `what` names them in the error.
std::string random_hex(const char* what) {
  unsigned char bytes[16];
  for (std::size_t got = 0; got < sizeof bytes;) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(std::string("cannot draw ") + what + " from the kernel (getrandom): " + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string hex;
  for (const unsigned char b : bytes) {
    hex.push_back(digits[b >> 4]);
    hex.push_back(digits[b & 15]);
  }
  return hex;
}

/// A fresh secret for one attempt of a job whose every rank this launcher starts, for the ranks'
/// STRATA_JOB_SECRET (a process's environment is its user's to read). Empty when the user gave one
/// (the ranks read it) or the job spans nodes (each node's launcher would draw another: the user's
/// must be given to all).
std::string draw_job_secret(const SpawnOptions& options) {
  for (const char* name : {"STRATA_JOB_SECRET", "STRATA_JOB_SECRET_FILE"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return {};
  if (options.nnodes > 1) return {};
  return random_hex("the job's secret");
}

/// The ranks' STRATA_ATTEMPT_ID: a value of this attempt's own, in the scope of the job's seals
/// (a message of another job or attempt under the same secret does not open). Empty for a job of
/// several nodes: each node's launcher would draw another.
std::string draw_attempt_id(const SpawnOptions& options) {
  return options.nnodes > 1 ? std::string() : random_hex("the job's attempt id");
}

ChildPlan make_plan(const SpawnOptions& options, int local_rank, int port, const std::string& program, int restart,
                    const std::string& secret, const std::string& attempt_id, int beacon_fd) {
  std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(options.node_rank * options.nproc + local_rank)},
      {"WORLD_SIZE", std::to_string(options.nnodes * options.nproc)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nproc)},
      {"GROUP_RANK", std::to_string(options.node_rank)},
      {"MASTER_ADDR", options.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"STRATA_SPAWNED", "1"},
      {"STRATA_RESTART_COUNT", std::to_string(restart)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart)},
      {kBeaconFdVariable, beacon_fd >= 0 ? std::to_string(beacon_fd) : std::string()},
      {detail::kAttemptIdVariable, attempt_id},  // empty replaces one inherited from an outer job
  };
  if (!secret.empty()) set.emplace_back("STRATA_JOB_SECRET", secret);
  set.insert(set.end(), options.env.begin(), options.env.end());
  ChildPlan plan;
  plan.strings.push_back(program);
  const auto& args = restart > 0 && !options.restart_args.empty() ? options.restart_args : options.args;
  plan.strings.insert(plan.strings.end(), args.begin(), args.end());
  const std::size_t argc = plan.strings.size();
  bool user_wait_policy = false, user_log_level = false;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [key, value] : set) replaced = replaced || key == name;
    if (!replaced) plan.strings.push_back(entry);
    user_wait_policy = user_wait_policy || name == "OMP_WAIT_POLICY";
    user_log_level = user_log_level || name == "TORCH_CPP_LOG_LEVEL";
  }
  for (const auto& [key, value] : set) plan.strings.push_back(key + "=" + value);
  // LibTorch's OpenMP workers spin after each parallel region by default. With several ranks on
  // one host's CPUs (the usual Gloo case) the spinning threads steal the cores the other ranks
  // need and make training 10-20x slower; PASSIVE makes idle workers sleep. A user's own
  // setting wins. OMP_NUM_THREADS is left alone: the trainer picks threads per rank.
  if (!user_wait_policy) plan.strings.push_back("OMP_WAIT_POLICY=PASSIVE");
  // c10d logs its connection retries during rendezvous as warnings with C++ frames; Strata
  // reports rendezvous failures itself, as one paragraph. A user's own level wins.
  if (!user_log_level) plan.strings.push_back("TORCH_CPP_LOG_LEVEL=ERROR");
  for (std::size_t i = 0; i < plan.strings.size(); ++i) {
    (i < argc ? plan.argv : plan.envp).push_back(plan.strings[i].data());
  }
  plan.argv.push_back(nullptr);
  plan.envp.push_back(nullptr);
  return plan;
}

/// Writes a message to stderr without allocating (usable between fork and exec).
void write_stderr(const char* text) { [[maybe_unused]] auto n = ::write(STDERR_FILENO, text, std::strlen(text)); }

/// Writes a non-negative number to stderr without allocating (strerror may allocate).
void write_stderr(int value) {
  char digits[16];
  int i = sizeof digits - 1;
  digits[i] = '\0';
  do {
    digits[--i] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 && i > 0);
  write_stderr(digits + i);
}

/// The child side of fork: only async-signal-safe calls until exec.
[[noreturn]] void become_rank(const ChildPlan& plan, pid_t parent, int devnull, int beacon_fd,
                              const SignalPipe& signals, const sigset_t& mask) {
  // Die with the launcher, and close the race where it died before prctl took effect.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(kExecFailed);
  for (std::size_t i = 0; i < std::size(SignalPipe::kSignals); ++i) {
    ::sigaction(SignalPipe::kSignals[i], &signals.old_action(i), nullptr);
  }
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
  if (beacon_fd >= 0) ::fcntl(beacon_fd, F_SETFD, 0);  // the rank inherits its beacons
  // /proc/self/exe rather than the path: every rank runs the very binary of the launcher, even
  // if a rebuild replaced the file meanwhile.
  ::execve("/proc/self/exe", plan.argv.data(), plan.envp.data());
  const int error = errno;
  write_stderr("strata: cannot execute /proc/self/exe for a rank: errno ");
  write_stderr(error);
  write_stderr("\n");
  ::_exit(kExecFailed);
}

struct Child {
  pid_t pid = -1;
  int rank = 0;               // global rank
  bool alive = true;
  int status = 0;             // wait status once reaped
  bool before_stop = false;   // ended (or was stopped) before the launcher began stopping the ranks
  int stopped_by = 0;         // the signal that stopped it (SIGSTOP, SIGTSTP, ...), if it was
  int local = 0;              // local rank: its beacon
  bool early = false;         // exited with status 0 before its run ended
  int status_lost_errno = 0;  // waitpid's errno when its status was lost
};

void signal_alive(const std::vector<Child>& children, int sig) {
  // Unreaped children keep their pid, so this never hits a recycled process.
  for (const auto& c : children) {
    if (c.alive) ::kill(c.pid, sig);
  }
}

/// Kills and reaps whatever was started; used when starting the group itself failed.
void kill_and_reap(std::vector<Child>& children) {
  signal_alive(children, SIGKILL);
  for (auto& c : children) {
    while (c.alive && ::waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    c.alive = false;
  }
}

std::vector<Child> start_ranks(const SpawnOptions& options, int port, const SignalPipe& signals, int restart,
                               int beacon_fd) {
  const std::string program = program_path();
  const std::string secret = draw_job_secret(options);  // a new one per attempt: nothing of the last opens
  const std::string attempt_id = draw_attempt_id(options);
  std::vector<ChildPlan> plans;
  for (int rank = 0; rank < options.nproc; ++rank)
    plans.push_back(make_plan(options, rank, port, program, restart, secret, attempt_id, beacon_fd));
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  std::vector<Child> children;
  for (int rank = 0; rank < options.nproc; ++rank) {
    // Block every signal across fork so that no handler of ours runs in the child before it
    // restores the host's dispositions.
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    const pid_t pid = ::fork();
    if (pid == 0) become_rank(plans[rank], parent, devnull, beacon_fd, signals, old);
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0) {
      kill_and_reap(children);
      if (devnull >= 0) ::close(devnull);
      throw Error("cannot start rank " + std::to_string(rank) + ": fork failed: " + std::strerror(fork_errno),
                  "Check the process and memory limits (ulimit -u, ulimit -v) or use a smaller --nproc.");
    }
    Child child;
    child.pid = pid;
    child.rank = options.node_rank * options.nproc + rank;
    child.local = rank;
    children.push_back(child);
  }
  if (devnull >= 0) ::close(devnull);
  return children;
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

void validate(const SpawnOptions& options) {
  if (options.nproc < 1) {
    throw UsageError("--nproc must be at least 1, got " + std::to_string(options.nproc),
                     "Give the number of ranks to start on this host, e.g. --nproc 2.");
  }
  if (options.master_port < 0 || options.master_port > 65535) {
    throw UsageError("the master port must be in 0..65535, got " + std::to_string(options.master_port),
                     "Use 0 to let strata pick a free port.");
  }
  if (options.nnodes < 1 || options.node_rank < 0 || options.node_rank >= options.nnodes) {
    throw UsageError("node rank " + std::to_string(options.node_rank) + " of " + std::to_string(options.nnodes) +
                         " nodes is not a node of the job",
                     "Give every node a distinct node rank below the node count.");
  }
  if (options.nnodes > 1 && options.master_port == 0) {
    throw UsageError("a job of " + std::to_string(options.nnodes) + " nodes needs the master port",
                     "Set MASTER_PORT (the same on every node).");
  }
  if (options.max_restarts < 0) {
    throw UsageError("--max-restarts must not be negative, got " + std::to_string(options.max_restarts),
                     "Use 0 for no restarts.");
  }
  if (options.grace.count() < 0) {
    throw UsageError("the grace period must not be negative", "Use 0 to kill the other ranks at once.");
  }
}

}  // namespace

void check_job_secret() { (void)detail::read_job_secret(); }

int spawn_and_supervise(const SpawnOptions& options) {
  validate(options);
  check_job_secret();  // once, here, not once per rank after they start
  SignalPipe signals;
  RankBeacons beacons(options.beacons ? options.nproc : 0);
  const bool single = options.nproc * options.nnodes == 1;
  for (int restart = 0;; ++restart) {
    // A fresh port per attempt: the old store's port may linger in TIME_WAIT.
    const int port = options.master_port != 0 ? options.master_port : free_port(options.master_addr);
    std::fflush(nullptr);  // buffered output must not be written twice by the children
    clear_failure_records(options.run_dir);
    beacons.reset();
    Supervisor supervisor(start_ranks(options, port, signals, restart, beacons.fd()), options.grace, signals,
                          beacons.fd() >= 0 ? &beacons : nullptr, single);
    int code = supervisor.run();
    if (code != 0 && !supervisor.interrupted()) code = supervisor.name_cause(options.run_dir, code);
    if (code != 0 && options.node_rank == 0) write_launcher_verdict(options.run_dir, supervisor, code);
    if (code == 0 || supervisor.interrupted() || restart >= options.max_restarts) return code;
    if (code == 2) {
      std::fprintf(stderr, "strata: not restarting: exit status 2 is a configuration or usage error\n");
      return code;
    }
    std::fprintf(stderr, "strata: restarting all %d ranks from the latest checkpoint (restart %d of %d)\n",
                 options.nproc, restart + 1, options.max_restarts);
  }
}

int fork_and_supervise(const SpawnOptions& options) {
  validate(options);
  check_job_secret();
  if (options.nproc != 1 || options.nnodes != 1 || options.max_restarts != 0) return kForkUnavailable;
  std::error_code ec;
  int threads = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec); !ec && it != decltype(it)(); it.increment(ec))
    ++threads;
  if (threads != 1) return kForkUnavailable;
  std::optional<SignalPipe> signals;
  signals.emplace();
  RankBeacons beacons(1);
  std::fflush(nullptr);  // buffered output must not be written twice
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t parent = ::getpid();
  const double started = unix_time_now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The rank: dies with the launcher; the launcher's handlers go before any signal is let in.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(kExecFailed);
    adopt_rank_beacon(beacons.keep_for_child(0));
    signals.reset();
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return kForkChild;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return kForkUnavailable;
  Child child;
  child.pid = pid;
  Supervisor supervisor({child}, options.grace, *signals, beacons.fd() >= 0 ? &beacons : nullptr, /*single=*/true);
  int code = supervisor.run();
  const auto run_dir = options.run_dir.empty() ? beacons.run_dir(0) : options.run_dir;
  if (code != 0 && !supervisor.interrupted()) code = supervisor.name_cause(run_dir, code, started);
  if (code != 0) write_launcher_verdict(run_dir, supervisor, code);
  return code;
}

int free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &found); rc != 0) {
    throw Error("cannot resolve '" + addr + "' to pick a free port: " + ::gai_strerror(rc),
                "Give an address or hostname of this machine as the master address, e.g. 127.0.0.1.");
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  int last_errno = 0;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    const bool ok = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0;
    last_errno = errno;
    ::close(fd);
    if (!ok) continue;
    if (bound.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(bound).sin_port);
    if (bound.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(bound).sin6_port);
  }
  throw Error("cannot bind a TCP socket on '" + addr + "' to pick a free port: " + std::strerror(last_errno),
              "Use an address of this machine as the master address (e.g. 127.0.0.1), or give the port yourself.");
}

}  // namespace strata
