#pragma once
// Strata's own launcher: `strata run exp.toml --nproc N` on one host spawns N copies of itself
// with torchrun-style variables and supervises them.

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace strata {

struct SpawnOptions {
  std::vector<std::string> args;   ///< arguments for each child (argv[1..]); the executable is this program
  int nproc = 1;                   ///< ranks to start
  std::string master_addr = "127.0.0.1";
  int master_port = 0;             ///< 0: pick a free port on master_addr
  std::chrono::seconds grace{5};   ///< time between SIGTERM and SIGKILL when stopping the others
  /// After a failure, stop every rank and start them all again, up to this many times (torchrun's
  /// --max-restarts); not after an interrupt of the launcher or a configuration error (exit 2).
  int max_restarts = 0;
  std::vector<std::string> restart_args;  ///< arguments of the ranks of a restart; empty: args
  std::vector<std::pair<std::string, std::string>> env;  ///< extra variables for every rank
  /// A node of a multi-node job (a Kubeflow pod): rank i here is node_rank * nproc + i of
  /// nnodes * nproc, and master_port must be given (every node uses the same).
  int nnodes = 1;
  int node_rank = 0;
  /// The run directory the ranks write into (known on the node of rank 0): the launcher reads
  /// the ranks' failure records there to name the cause of a failure, and writes summary.json
  /// itself when rank 0 could not. Empty: no verdict files.
  std::filesystem::path run_dir;
  /// The ranks are `strata run` ranks, which keep a beacon (job/verdict.hpp): a rank that exits
  /// before its run ended, even with status 0, fails the job, and a verdict names the phase, the
  /// step and the plugin library of a rank that died.
  bool beacons = false;
};

/// Starts `nproc` children of this executable with RANK, WORLD_SIZE, LOCAL_RANK,
/// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT set, and supervises them: the first child that
/// exits non-zero or is killed makes it stop the others (SIGTERM, then SIGKILL after `grace`)
/// and print which rank failed and how ("rank 1 was killed by signal 9 (SIGKILL)"). SIGINT and
/// SIGTERM to this process are forwarded to every child. Children die with their parent
/// (PR_SET_PDEATHSIG). With max_restarts, a failed group is restarted whole (each restart on a
/// fresh port, with STRATA_RESTART_COUNT and TORCHELASTIC_RESTART_COUNT set to its number, and
/// logged). The cause of a failure is printed as one paragraph (rank, how it ended, phase, step,
/// the fix). Returns the exit code for this process: 0 when all succeeded, else the failed rank's
/// exit code, or 128 + signal.
int spawn_and_supervise(const SpawnOptions& options);

/// Checks the job's secret as every rank will read it (STRATA_JOB_SECRET, or the file named by
/// STRATA_JOB_SECRET_FILE: readable, only by its owner, at least 16 characters), so that a bad
/// one is reported once, by the launcher, before any rank starts or the run directory is opened.
/// Throws UsageError (exit 2); nothing when neither variable is set. spawn_and_supervise() and
/// fork_and_supervise() call it too.
void check_job_secret();

/// fork_and_supervise() in a child, which is to carry on as a rank of the job.
inline constexpr int kForkChild = -1;
/// fork_and_supervise() could not fork (another thread runs: a fork would copy its locks held).
inline constexpr int kForkUnavailable = -2;

/// A job of this node only, without restarts, run by forks of this very process: each child
/// returns kForkChild with `local_rank` set, to run that rank here, its libraries already loaded
/// and its configuration read (no second start of the program, 0.3 s of CPU a rank). A job of
/// several ranks gets in each child's environment what an exec'd rank gets (RANK, WORLD_SIZE,
/// MASTER_PORT, the job's secret, options.env; stdin from /dev/null). The parent supervises the
/// ranks as spawn_and_supervise() does (signals forwarded, the cause named, the launcher's verdict
/// written in the run directory, options.run_dir or the one a rank of one opened, found through
/// its beacon) and returns the job's exit code. kForkUnavailable: spawn. The children inherit
/// this process's OpenMP runtime, whose idle workers spin (OMP_WAIT_POLICY is read once, at
/// load): fork several ranks only where each computes with one thread.
int fork_and_supervise(const SpawnOptions& options, int& local_rank);

/// A TCP port on `addr` that was free a moment ago (bind to port 0, read it, close).
int free_port(const std::string& addr = "127.0.0.1");

}  // namespace strata
