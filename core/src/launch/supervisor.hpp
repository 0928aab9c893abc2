#pragma once
// The single-host launcher's watch over the ranks it started (launch/spawn.cpp starts them with
// torchrun-style variables, as torchrun's elastic agent does): their exits and stops, the
// launcher's own SIGINT/SIGTERM, the first failure stopping the rest after a grace period, the
// cause named from the ranks' beacons and failure records, and summary.json written when rank 0
// could not write it.
//
// Signals reach the supervisor through a self-pipe written by sigaction handlers rather than
// through sigwait/signalfd: those need the signals blocked in *every* thread, and the host may
// already run LibTorch or test-framework threads that we do not control. A handler runs in
// whichever thread receives the signal, so the pipe sees it either way.

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <iterator>
#include <vector>

namespace strata {

class RankBeacons;

namespace launch {

/// Installs the SIGINT/SIGTERM/SIGCHLD handlers and the self-pipe for one supervision, and puts
/// everything back on destruction. Signals the host ignores (SIGINT under `nohup` or `cmd &`)
/// stay ignored. One at a time in a process (strata::Error otherwise).
class SignalPipe {
 public:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGCHLD};

  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  /// Waits up to `timeout` for a signal; returns those received (SIGCHLD included).
  std::vector<int> wait(std::chrono::milliseconds timeout) const;
  /// The dispositions before ours, for the children to restore before exec.
  const struct sigaction& old_action(std::size_t i) const { return old_[i]; }

 private:
  int fds_[2] = {-1, -1};
  struct sigaction old_[std::size(kSignals)] {};
};

/// A rank the launcher started.
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

/// Sends `sig` to every child not yet reaped.
void signal_alive(const std::vector<Child>& children, int sig);
/// Kills and reaps whatever was started; used when starting the group itself failed.
void kill_and_reap(std::vector<Child>& children);

struct SupervisionOptions {
  std::chrono::seconds grace{30};     ///< how long the survivors of a failure get before SIGKILL
  const SignalPipe* signals = nullptr;  ///< the launcher's signals (required)
  const RankBeacons* beacons = nullptr;  ///< the ranks' beacons (null: none)
  bool single = false;  ///< a job of one rank, whose own output says what a launcher's lines would repeat
  /// Where the run's failure records and summary.json are, asked once the ranks ended.
  std::function<std::filesystem::path()> run_dir;
  double since = 0;            ///< failure records older than this (UNIX seconds) are an earlier run's
  bool write_verdict = true;   ///< write summary.json when rank 0 could not (node 0 of a job only)
};

/// How a supervision ended: the job's exit code and whether the launcher was interrupted.
struct Supervision {
  int code = 0;
  bool interrupted = false;
};

/// Waits for `children`; the first failure or a SIGINT/SIGTERM to the launcher stops the rest.
/// A failure's cause is named (a paragraph on stderr, the exit code it implies) and written to
/// summary.json when rank 0 did not. Every child is reaped when it returns or throws.
Supervision supervise(std::vector<Child> children, const SupervisionOptions& options);

}  // namespace launch
}  // namespace strata
