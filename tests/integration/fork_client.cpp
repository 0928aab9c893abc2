// strata_fork_client SOCKET STRATA ARGS...: runs `STRATA ARGS...` through the fork server listening
// on SOCKET (core/app/fork_server.hpp) as if this process had exec'd it: the command gets this
// process's stdin, stdout, stderr, working directory and environment, and this process exits with
// the command's status (or dies of its signal). Killed, it takes the command with it (the server
// sees the connection close). Where the server cannot run the command as that process, or is not
// there, this process execs STRATA itself. The integration tests start commands through it
// (strata_test.py), which saves LibTorch's start-up (about 0.4 s of CPU) per command.
// Standard C++ and POSIX only: it starts in about a millisecond.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "fork_wire.hpp"

extern char** environ;

namespace {

using strata::fork_wire::kMagic;
using strata::fork_wire::read_exactly;
using strata::fork_wire::Reply;
using strata::fork_wire::send_all;

[[noreturn]] void start_itself(char** argv) {
  ::execv(argv[0], argv);
  std::fprintf(stderr, "strata_fork_client: cannot start %s: %s\n", argv[0], std::strerror(errno));
  ::_exit(127);
}

bool read_reply(int fd, Reply& r) { return read_exactly(fd, &r, sizeof r); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: strata_fork_client SOCKET STRATA [ARGS...]\n");
    return 2;
  }
  char** command = argv + 2;
  const int command_argc = argc - 2;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const int conn = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (conn < 0 || std::strlen(argv[1]) >= sizeof addr.sun_path) start_itself(command);
  std::strcpy(addr.sun_path, argv[1]);
  if (::connect(conn, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) start_itself(command);

  std::string strings;
  for (int i = 0; i < command_argc; ++i) strings.append(command[i]).push_back('\0');
  std::uint32_t envc = 0;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e, ++envc) strings.append(*e).push_back('\0');
  strata::fork_wire::HeaderMessage m;
  m.header = {kMagic, static_cast<std::uint32_t>(command_argc), envc, static_cast<std::uint32_t>(strings.size())};

  const int cwd = ::open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cwd < 0) start_itself(command);
  const int fds[strata::fork_wire::kPassedFds] = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, cwd};
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  if (::sendmsg(conn, &m.msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof m.header) ||
      !send_all(conn, strings.data(), strings.size()))
    start_itself(command);
  ::close(cwd);

  Reply r{};
  if (!read_reply(conn, r) || r.kind == strata::fork_wire::kStartYourself) start_itself(command);
  if (r.kind != strata::fork_wire::kStarted) {
    std::fprintf(stderr, "strata_fork_client: the server answered %d\n", r.kind);
    return 125;
  }
  // From here the command runs: its end is ours.
  const int pid = r.value;
  if (!read_reply(conn, r)) {  // the command would run on, holding our output open
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    std::fprintf(stderr, "strata_fork_client: the fork server went away while pid %d ran; it was killed\n", pid);
    return 125;
  }
  if (r.kind == strata::fork_wire::kExited) return r.value;
  if (r.kind == strata::fork_wire::kSignalled) {
    const rlimit no_core{0, 0};  // the command dumped its core already, where it did
    ::setrlimit(RLIMIT_CORE, &no_core);
    std::signal(r.value, SIG_DFL);
    ::kill(::getpid(), r.value);
    return 128 + r.value;
  }
  std::fprintf(stderr, "strata_fork_client: the server answered %d\n", r.kind);
  return 125;
}
