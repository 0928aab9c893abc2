#pragma once
// The fork server's wire (fork_server.hpp), shared by the server and its client
// (tests/integration/fork_client.cpp): standard C++ and POSIX only, so that the client stays small.
// Both ends are on one host and of one user. The client's request is one message carrying its stdin,
// stdout, stderr and working directory (SCM_RIGHTS) with a Header, then `bytes` of NUL-terminated
// strings, argv then the environment. Each answer is a Reply: kStartYourself (the client starts the
// program itself), or kStarted (value: the pid), then kExited (the exit code) or kSignalled (the
// signal).

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace strata::fork_wire {

inline constexpr std::uint32_t kMagic = 0x53464b31;  // "SFK1"
inline constexpr int kPassedFds = 4;                 // stdin, stdout, stderr, the working directory

struct Header {
  std::uint32_t magic, argc, envc, bytes;
};

enum ReplyKind : std::int32_t { kStartYourself = 0, kStarted = 1, kExited = 2, kSignalled = 3 };

struct Reply {
  std::int32_t kind, value;
};

/// The message of a request's Header and its kPassedFds descriptors, its buffers in itself.
struct HeaderMessage {
  Header header{};
  iovec io{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kPassedFds)] = {};
  msghdr msg{};

  HeaderMessage() {
    io = {&header, sizeof header};
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  HeaderMessage(const HeaderMessage&) = delete;
  HeaderMessage& operator=(const HeaderMessage&) = delete;
};

/// Reads exactly n bytes (false at an end of file or an error).
inline bool read_exactly(int fd, void* into, std::size_t n) {
  auto* to = static_cast<char*>(into);
  while (n > 0) {
    const ssize_t got = ::read(fd, to, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    to += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

/// Sends all n bytes over a socket; false when the peer is gone (never SIGPIPE).
inline bool send_all(int fd, const void* from, std::size_t n) {
  const auto* data = static_cast<const char*>(from);
  while (n > 0) {
    const ssize_t put = ::send(fd, data, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    data += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

}  // namespace strata::fork_wire
