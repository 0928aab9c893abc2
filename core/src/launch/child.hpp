#pragma once
// Runs this program once more as a child (`strata compare` starts each run this way) and hands
// its output over line by line.

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

}  // namespace strata
