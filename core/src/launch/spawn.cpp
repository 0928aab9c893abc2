// strata's single-host launcher: fork/exec N copies of this program with torchrun-style
// variables, then supervise them like torchrun's elastic agent does (first failure stops all;
// launch/supervisor.cpp), restarting all of them from the latest checkpoint up to max_restarts.

#include "launch/spawn.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm/job_guard.hpp"
#include "job/verdict.hpp"
#include "launch/child.hpp"
#include "io/raw_stderr.hpp"
#include "launch/supervisor.hpp"
#include "strata/errors.hpp"
#include "text/units.hpp"

extern char** environ;

namespace strata {
namespace {

using launch::Child;
using launch::SignalPipe;

/// Exit status of a child that could not become a rank (exec failed); 127 as in shells.
constexpr int kExecFailed = 127;

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

/// The variables that make a process rank `local_rank` of the job: torchrun's, and Strata's own.
std::vector<std::pair<std::string, std::string>> rank_variables(const SpawnOptions& options, int local_rank, int port,
                                                                int restart, const std::string& secret,
                                                                const std::string& attempt_id, int beacon_fd) {
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
  return set;
}

ChildPlan make_plan(const SpawnOptions& options, int local_rank, int port, const std::string& program, int restart,
                    const std::string& secret, const std::string& attempt_id, int beacon_fd) {
  const auto set = rank_variables(options, local_rank, port, restart, secret, attempt_id, beacon_fd);
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
  detail::write_stderr("strata: cannot execute /proc/self/exe for a rank: errno ");
  detail::write_stderr_number(error);
  detail::write_stderr("\n");
  ::_exit(kExecFailed);
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
    launch::SupervisionOptions watch;
    watch.grace = options.grace;
    watch.signals = &signals;
    watch.beacons = beacons.fd() >= 0 ? &beacons : nullptr;
    watch.single = single;
    watch.run_dir = [&] { return options.run_dir; };
    watch.write_verdict = options.node_rank == 0;
    const auto ended = launch::supervise(start_ranks(options, port, signals, restart, beacons.fd()), watch);
    const int code = ended.code;
    if (code == 0 || ended.interrupted || restart >= options.max_restarts) return code;
    if (code == 2) {
      std::fprintf(stderr, "strata: not restarting: exit status 2 is a configuration or usage error\n");
      return code;
    }
    std::fprintf(stderr, "strata: restarting all %d ranks from the latest checkpoint (restart %d of %d)\n",
                 options.nproc, restart + 1, options.max_restarts);
  }
}

int fork_and_supervise(const SpawnOptions& options, int& local_rank) {
  validate(options);
  check_job_secret();
  if (options.nnodes != 1 || options.max_restarts != 0 || !single_threaded()) return kForkUnavailable;
  // A job of several ranks: each learns its place from the variables an exec'd rank would get.
  // Drawn before fork: the children only set them.
  std::vector<std::vector<std::pair<std::string, std::string>>> variables;
  if (options.nproc > 1) {
    const int port = options.master_port != 0 ? options.master_port : free_port(options.master_addr);
    const std::string secret = draw_job_secret(options);
    const std::string attempt_id = draw_attempt_id(options);
    for (int rank = 0; rank < options.nproc; ++rank)
      variables.push_back(rank_variables(options, rank, port, /*restart=*/0, secret, attempt_id, /*beacon_fd=*/-1));
  }
  std::optional<SignalPipe> signals;
  signals.emplace();
  RankBeacons beacons(options.nproc);
  clear_failure_records(options.run_dir);
  std::fflush(nullptr);  // buffered output must not be written twice
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t parent = ::getpid();
  const double started = unix_time_now();
  std::vector<Child> children;
  for (int rank = 0; rank < options.nproc; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      // A rank: dies with the launcher; the launcher's handlers go before any signal is let in.
      // This process has one thread, so what it allocates from here on is its own.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(kExecFailed);
      adopt_rank_beacon(beacons.keep_for_child(rank));
      signals.reset();
      if (options.nproc > 1) {
        for (const auto& [key, value] : variables[static_cast<std::size_t>(rank)])
          ::setenv(key.c_str(), value.c_str(), /*overwrite=*/1);
        // As an exec'd rank's: no terminal input for N processes at once.
        if (const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC); devnull >= 0) {
          ::dup2(devnull, STDIN_FILENO);
          ::close(devnull);
        }
      }
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
      local_rank = rank;
      return kForkChild;
    }
    if (pid < 0) {
      const int fork_errno = errno;
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
      kill_and_reap(children);
      if (children.empty()) return kForkUnavailable;
      throw Error("cannot start rank " + std::to_string(rank) + ": fork failed: " + std::strerror(fork_errno),
                  "Check the process and memory limits (ulimit -u, ulimit -v) or use a smaller --nproc.");
    }
    Child child;
    child.pid = pid;
    child.rank = rank;
    child.local = rank;
    children.push_back(child);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  launch::SupervisionOptions watch;
  watch.grace = options.grace;
  watch.signals = &*signals;
  watch.beacons = beacons.fd() >= 0 ? &beacons : nullptr;
  watch.single = options.nproc == 1;
  watch.run_dir = [&] { return options.run_dir.empty() ? beacons.run_dir(0) : options.run_dir; };
  watch.since = started;
  watch.write_verdict = true;
  return launch::supervise(std::move(children), watch).code;
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
