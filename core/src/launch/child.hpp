#pragma once
// Runs this program once more as a child (`strata compare` starts each run this way) and hands
// its output over line by line, or keeps it in a run directory's output.log.

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace strata {

struct ChildOutcome {
  int exit_code = 0;     ///< the child's exit status, or 128 + signal
  int interrupted = 0;   ///< SIGINT or SIGTERM received by this process while the child ran; 0 if none
};

/// Starts this executable with `args` (argv[1..]) in its own process group, stdin from
/// /dev/null, stdout and stderr merged into one pipe whose lines go to `on_line` (without the
/// newline; carriage-return progress updates count as lines). The child dies with this process
/// (PR_SET_PDEATHSIG). A SIGINT or SIGTERM to this process is forwarded to the child once (a
/// launcher child stops its ranks) and reported in the outcome. Throws strata::Error when the
/// child cannot be started.
/// Throws UsageError when this process is a rank of a multi-rank job: `strata <command>` (compare,
/// check) starts its own jobs on this host and must be started once.
void require_single_process(const std::string& command);

ChildOutcome run_self(const std::vector<std::string>& args, const std::function<void(const std::string&)>& on_line);

/// The command line of this program (argv[1..] in, exit code out), as its main() runs it. When one is
/// set, run_self forks a child that runs `args` through it, instead of starting the program again
/// (0.25 s of CPU a run: `strata check` and `compare` run hundreds), where
/// may_fork_in_image("STRATA_FORK_RUNS"). The child's environment drops the variables of a rank, as an exec'd one's does.
using SelfRunner = int (*)(const std::vector<std::string>& args);
void set_self_runner(SelfRunner runner);

/// Whether this process has only the calling thread (a fork copies only it: another thread may
/// hold a lock the child would then wait on for good).
bool single_threaded();
/// Whether this process may fork a child that goes on in its image (a run of check or compare, a
/// rank of strata run): `off_variable` is not "0", LibTorch's CUDA library is not loaded (CUDA,
/// once initialized, does not survive a fork) and this process has one thread.
bool may_fork_in_image(const char* off_variable);

/// A child `strata ARGS` (run_self) whose output went to DIR/output.log.
struct LoggedChild {
  ChildOutcome outcome;
  std::vector<std::string> lines;  ///< its output, line by line
  double seconds = 0;              ///< wall time
  /// Why output.log is incomplete ("cannot write to DIR/output.log: No space left on device."):
  /// the first write that failed; the child ran on. Empty when the log is whole.
  std::string log_error;
};

/// Creates DIR, runs `strata ARGS` with its output written (line by line, each handed to the
/// system at once) to DIR/output.log, kept in the result and handed to `on_line` (may be empty).
/// Throws strata::Error naming the file when output.log cannot be created; a later write error
/// stops the log and is reported in log_error (the child is not stopped half-way for it).
LoggedChild run_logged(const std::vector<std::string>& args, const std::filesystem::path& dir,
                       const std::function<void(const std::string&)>& on_line = {});

}  // namespace strata
