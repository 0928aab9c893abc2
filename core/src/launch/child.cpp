#include "launch/child.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "device/cuda_support.hpp"
#include "io/atomic_file.hpp"
#include "io/raw_stderr.hpp"
#include "io/run_dir.hpp"
#include "job/world.hpp"
#include "strata/errors.hpp"

extern char** environ;

namespace strata {
namespace {

SelfRunner g_runner = nullptr;
int g_start_threads = 0;  // LibTorch's intra-op threads as the program started

// Set by the handlers while a child runs; read by run_self's loop.
volatile std::sig_atomic_t g_child_pid = 0;
volatile std::sig_atomic_t g_received = 0;

void forward_signal(int sig) {
  const int saved = errno;
  if (g_received == 0) {
    g_received = sig;
    if (g_child_pid > 0) ::kill(-static_cast<pid_t>(g_child_pid), sig);  // its whole process group
  }
  errno = saved;
}

/// Variables by which a process learns that it is a rank of a job. The runs of a comparison are
/// jobs of their own on this host, whatever launched the comparison.
bool is_rank_variable(const std::string& name) {
  static const std::array<const char*, 15> names = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "STRATA_SPAWNED", "SLURM_PROCID", "SLURM_NTASKS",
      "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "OMPI_COMM_WORLD_RANK",
      "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK"};
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

/// Restores the previous dispositions of SIGINT and SIGTERM when destroyed.
class ForwardSignals {
 public:
  ForwardSignals() {
    g_received = 0;
    for (std::size_t i = 0; i < kSignals.size(); ++i) {
      ::sigaction(kSignals[i], nullptr, &old_[i]);
      if (old_[i].sa_handler == SIG_IGN) continue;  // under nohup: stay deaf to it
      struct sigaction action {};
      action.sa_handler = forward_signal;
      action.sa_flags = SA_RESTART;
      sigemptyset(&action.sa_mask);
      ::sigaction(kSignals[i], &action, nullptr);
    }
  }
  ~ForwardSignals() {
    g_child_pid = 0;
    for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  ForwardSignals(const ForwardSignals&) = delete;
  ForwardSignals& operator=(const ForwardSignals&) = delete;
  const struct sigaction& old_action(std::size_t i) const { return old_[i]; }
  static constexpr std::array<int, 2> kSignals = {SIGINT, SIGTERM};

 private:
  std::array<struct sigaction, 2> old_{};
};

}  // namespace

bool single_threaded() {
  std::error_code ec;
  int threads = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec); !ec && it != decltype(it)(); it.increment(ec))
    ++threads;
  return !ec && threads == 1;
}

bool may_fork_in_image(const char* off_variable) {
  const char* off = std::getenv(off_variable);
  return !(off != nullptr && std::string(off) == "0") && !cuda_support::loaded() && single_threaded();
}

void set_self_runner(SelfRunner runner) {
  g_runner = runner;
  g_start_threads = at::get_num_threads();
}

void require_single_process(const std::string& command) {
  if (const auto world = world_from_environment(); world && world->world_size > 1)
    throw UsageError(fmt::format("`strata {}` was started as rank {} of a {}-rank job ({}); it runs its own jobs on "
                                 "this host.",
                                 command, world->rank, world->world_size, world->launcher),
                     fmt::format("Start `strata {}` once (not under srun -n N, torchrun or mpirun).", command));
}

ChildOutcome run_self(const std::vector<std::string>& args, const std::function<void(const std::string&)>& on_line) {
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> strings{"strata"};
  strings.insert(strings.end(), args.begin(), args.end());
  const std::size_t argc = strings.size();
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    if (!is_rank_variable(entry.substr(0, entry.find('=')))) strings.push_back(entry);
  }
  std::vector<char*> argv, envp;
  for (std::size_t i = 0; i < strings.size(); ++i) (i < argc ? argv : envp).push_back(strings[i].data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  // In this process's image when it can: everything the run needs is loaded already. The child
  // drops the variables of a rank, as envp above does for an exec'd one.
  const bool in_image = g_runner != nullptr && may_fork_in_image("STRATA_FORK_RUNS");
  std::vector<std::string> rank_names;
  for (char** e = environ; in_image && e && *e; ++e) {
    const std::string entry = *e;
    if (const auto name = entry.substr(0, entry.find('=')); is_rank_variable(name)) rank_names.push_back(name);
  }
  std::fflush(nullptr);  // buffered output must not be written twice

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe for a run: ") + std::strerror(errno));
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ForwardSignals forwarding;
  const pid_t parent = ::getpid();
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: a terminal's Ctrl-C reaches it once, through us
    if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != parent) ::_exit(127);
    for (std::size_t i = 0; i < ForwardSignals::kSignals.size(); ++i)
      ::sigaction(ForwardSignals::kSignals[i], &forwarding.old_action(i), nullptr);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(out[1], STDERR_FILENO);
    if (in_image) {
      // This process had one thread: what it allocates from here on is its own. The run ends the
      // process as a program would, but without the parent's static destructors and atexit work.
      for (const auto& name : rank_names) ::unsetenv(name.c_str());
      // LibTorch's threads as a fresh start has them: the checks this process ran (every run of a
      // comparison is validated here first) may have set them, and a rank alone keeps the default.
      at::set_num_threads(g_start_threads);
      run_dir_locks_closed_in_child();
      int code = 1;
      try {
        code = g_runner(args);
      } catch (...) {
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    ::execve("/proc/self/exe", argv.data(), envp.data());
    detail::write_stderr("strata: cannot execute /proc/self/exe for a run\n");
    ::_exit(127);
  }
  const int fork_errno = errno;
  if (pid > 0) {
    ::setpgid(pid, pid);  // also here, so that forwarding works before the child ran setpgid
    g_child_pid = pid;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(out[1]);
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) {
    ::close(out[0]);
    throw Error(std::string("cannot start a run: fork failed: ") + std::strerror(fork_errno),
                "Check the process and memory limits (ulimit -u, ulimit -v).");
  }

  std::string pending;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      const char c = buffer[i];
      if (c == '\n' || c == '\r') {
        if (!pending.empty()) on_line(pending);
        pending.clear();
      } else {
        pending += c;
      }
    }
  }
  if (!pending.empty()) on_line(pending);
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ChildOutcome outcome;
  outcome.interrupted = g_received;
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return outcome;
}

LoggedChild run_logged(const std::vector<std::string>& args, const std::filesystem::path& dir,
                       const std::function<void(const std::string&)>& on_line) {
  std::filesystem::create_directories(dir);
  // Streamed, not renamed into place at the end: output.log is there to follow a run as it goes.
  StreamedFile log;
  if (!log.open(dir / "output.log", /*exclusive=*/false))
    throw Error(fmt::format("cannot create {}: {}.", (dir / "output.log").string(), std::strerror(errno)),
                "Check free disk space and permissions.");
  LoggedChild child;
  const auto started = std::chrono::steady_clock::now();
  child.outcome = run_self(args, [&](const std::string& line) {
    if (child.log_error.empty()) {
      try {
        const std::string text = line + "\n";
        log.append(text.data(), text.size());
      } catch (const Error& e) {
        child.log_error = e.what();
      }
    }
    child.lines.push_back(line);
    if (on_line) on_line(line);
  });
  child.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return child;
}

}  // namespace strata
