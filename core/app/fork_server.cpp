#include "fork_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fork_wire.hpp"
#include "io/raw_stderr.hpp"
#include "launch/child.hpp"

extern char** environ;

namespace strata::app {

namespace {

using fork_wire::Header;
using fork_wire::kMagic;
using fork_wire::kPassedFds;
using fork_wire::read_exactly;
using fork_wire::Reply;
using fork_wire::ReplyKind;
using fork_wire::send_all;
constexpr std::uint32_t kMaxBytes = 64u << 20;

/// A request read off a connection: the passed descriptors and the strings.
struct Request {
  int fds[kPassedFds] = {-1, -1, -1, -1};
  std::vector<char> strings;
  std::vector<char*> argv, envp;  // into `strings`

  ~Request() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

void say(const std::string& text) {
  const std::string line = "strata fork server: " + text + "\n";
  detail::write_stderr(line.data(), line.size());
}

/// Ends a command and its process group (the ranks it forked die with it too: PR_SET_PDEATHSIG).
void kill_command(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
}

bool send_reply(int fd, ReplyKind kind, int value) {
  const Reply r{kind, value};
  return send_all(fd, &r, sizeof r);
}

/// Reads one request; false when the peer sent something else (it is then dropped).
bool read_request(int conn, Request& r) {
  fork_wire::HeaderMessage m;
  Header& h = m.header;
  msghdr& msg = m.msg;
  ssize_t got;
  do got = ::recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  if (got <= 0) return false;
  std::size_t received = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i, ++received) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (received < kPassedFds) r.fds[received] = fd;
      else ::close(fd);
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) return false;
  for (int fd : r.fds)
    if (fd < 0) return false;
  if (static_cast<std::size_t>(got) < sizeof h &&
      !read_exactly(conn, reinterpret_cast<char*>(&h) + got, sizeof h - static_cast<std::size_t>(got)))
    return false;
  if (h.magic != kMagic || h.argc == 0 || h.bytes > kMaxBytes) return false;
  r.strings.resize(h.bytes + 1, '\0');
  if (!read_exactly(conn, r.strings.data(), h.bytes)) return false;
  // Split into argc + envc strings; the count must match exactly.
  std::vector<char*> all;
  for (std::size_t at = 0; at < h.bytes;) {
    all.push_back(r.strings.data() + at);
    at += std::strlen(r.strings.data() + at) + 1;
  }
  if (all.size() != static_cast<std::size_t>(h.argc) + h.envc) return false;
  r.argv.assign(all.begin(), all.begin() + h.argc);
  r.envp.assign(all.begin() + h.argc, all.end());
  r.argv.push_back(nullptr);
  r.envp.push_back(nullptr);
  return true;
}

/// Variables read while the program loads (LibTorch's and OpenMP's start-up, the dynamic loader,
/// the C library, CUDA's detection in main): a command whose values differ from the server's is not
/// the process a fork of the server would be.
bool read_at_load(std::string_view name) {
  for (std::string_view prefix : {"OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "LD_", "MALLOC_", "GLIBC_", "TORCH_",
                                  "PYTORCH_", "CUDA_", "NVIDIA_", "NCCL_", "LC_"})
    if (name.substr(0, prefix.size()) == prefix) return true;
  const std::string_view sanitizer = "SAN_OPTIONS";  // ASAN_OPTIONS, UBSAN_OPTIONS, ...
  if (name.size() >= sanitizer.size() && name.substr(name.size() - sanitizer.size()) == sanitizer) return true;
  // STRATA_CUDA: main() decides whether to open LibTorch's CUDA library before it serves.
  return name == "LANG" || name == "LANGUAGE" || name == "TZ" || name == "STRATA_CUDA";
}

std::map<std::string, std::string> load_time_variables(char* const* env) {
  std::map<std::string, std::string> out;
  for (char* const* e = env; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const auto eq = entry.find('=');
    const std::string_view name = entry.substr(0, eq);
    if (read_at_load(name))
      out.emplace(std::string(name), eq == std::string_view::npos ? std::string() : std::string(entry.substr(eq + 1)));
  }
  return out;
}

bool same_file(const char* a, const char* b) {
  struct stat sa {}, sb {};
  return ::stat(a, &sa) == 0 && ::stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

int serve_forks(const char* socket_path, CommandRunner runner) {
  if (!may_fork_in_image("STRATA_FORK_RUNS")) {
    say("this process cannot run commands in forks of itself (LibTorch's CUDA library is loaded, or "
        "STRATA_FORK_RUNS=0); start the commands themselves.");
    return 2;
  }
  ::unsetenv("STRATA_FORK_SERVER");
  const auto own_variables = load_time_variables(environ);

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (std::strlen(socket_path) >= sizeof addr.sun_path) {
    say(std::string("the socket path is too long: ") + socket_path);
    return 2;
  }
  std::strcpy(addr.sun_path, socket_path);
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 64) != 0) {
    say(std::string("cannot listen on ") + socket_path + ": " + std::strerror(errno));
    return 2;
  }

  sigset_t handled, original;
  sigemptyset(&handled);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&handled, s);
  ::sigprocmask(SIG_BLOCK, &handled, &original);
  const int signals = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  struct sigaction old_pipe {};
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe);

  std::map<pid_t, int> waiting;  // pid -> its client's connection (-1 once the client left)
  bool serving = signals >= 0;
  while (serving) {
    // Its standard input is its lifetime: the starter holds the other end of a pipe (a thread of the
    // starter that ends would fire PR_SET_PDEATHSIG), and its end of file ends the server.
    std::vector<pollfd> fds{{signals, POLLIN, 0}, {listener, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    std::vector<pid_t> polled;  // the command of each client connection in `fds`, from fds[3] on
    for (const auto& [pid, conn] : waiting)
      if (conn >= 0) {
        fds.push_back({conn, POLLIN, 0});
        polled.push_back(pid);
      }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[2].revents != 0) {
      char byte;
      if (::read(STDIN_FILENO, &byte, 1) <= 0) serving = false;
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      while (::read(signals, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
        if (info.ssi_signo != SIGCHLD) serving = false;
      int status = 0;
      for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
        const auto it = waiting.find(pid);
        if (it == waiting.end()) continue;
        if (it->second >= 0) {
          if (WIFSIGNALED(status)) send_reply(it->second, fork_wire::kSignalled, WTERMSIG(status));
          else send_reply(it->second, fork_wire::kExited, WEXITSTATUS(status));
          ::close(it->second);
        }
        waiting.erase(it);
      }
    }
    // A client that went away (its only write was the request): its command goes too.
    for (std::size_t i = 3; i < fds.size(); ++i) {
      const auto it = waiting.find(polled[i - 3]);
      if (fds[i].revents == 0 || it == waiting.end() || it->second < 0) continue;  // or it ended above
      kill_command(it->first);
      ::close(it->second);
      it->second = -1;
    }
    if (!serving || (fds[1].revents & POLLIN) == 0) continue;
    const int conn = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    ucred peer{};
    socklen_t length = sizeof peer;
    const timeval limit{5, 0};  // a client sends its request at once
    ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    Request request;
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || peer.uid != ::geteuid() ||
        !read_request(conn, request)) {
      ::close(conn);
      continue;
    }
    if (!same_file(request.argv[0], "/proc/self/exe") || load_time_variables(request.envp.data()) != own_variables) {
      send_reply(conn, fork_wire::kStartYourself, 0);
      ::close(conn);
      continue;
    }
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      // The command's own process: the client's descriptors, directory, environment and argv;
      // nothing of the server's open; the signal state of a process started afresh.
      ::setpgid(0, 0);
      ::sigaction(SIGPIPE, &old_pipe, nullptr);
      for (int i = 0; i < 3; ++i)
        if (::dup2(request.fds[i], i) < 0) ::_exit(126);
      if (::fchdir(request.fds[3]) != 0) ::_exit(126);
      for (int fd : request.fds)
        if (fd > STDERR_FILENO) ::close(fd);
      ::close(listener);
      ::close(signals);
      ::close(conn);
      for (const auto& [other, other_conn] : waiting)
        if (other_conn >= 0) ::close(other_conn);
      ::sigprocmask(SIG_SETMASK, &original, nullptr);
      ::clearenv();
      for (char* const* e = request.envp.data(); *e != nullptr; ++e) ::putenv(*e);
      // It ends as strata's own forked runs do (launch/child.cpp): its output flushed, without the
      // static destructors and atexit work of the image it shares (LibTorch's take 0.17 s).
      const int code = runner(static_cast<int>(request.argv.size() - 1), request.argv.data());
      std::fflush(nullptr);
      ::_exit(code);
    }
    if (pid < 0 || !send_reply(conn, fork_wire::kStarted, pid)) {
      if (pid > 0) ::kill(pid, SIGKILL);
      else send_reply(conn, fork_wire::kStartYourself, errno);
      ::close(conn);
      if (pid > 0) waiting.emplace(pid, -1);
      continue;
    }
    ::setpgid(pid, pid);  // also here, so that a kill of its group reaches it before it ran setpgid
    waiting.emplace(pid, conn);
  }
  for (auto& [pid, conn] : waiting) {
    kill_command(pid);
    if (conn >= 0) ::close(conn);
  }
  ::unlink(socket_path);
  return 0;
}

}  // namespace strata::app
