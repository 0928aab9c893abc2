#pragma once
// Child processes of the config fuzz test: forked, output captured, time and memory bounded.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace strata::fuzz {

/// How a child ended.
struct Outcome {
  int status = 0;          ///< as waitpid reports it
  bool timed_out = false;  ///< killed (SIGKILL) after its time limit
  double seconds = 0;      ///< wall time
  long max_rss_kb = 0;     ///< peak resident set, in KiB
  std::string output;      ///< stdout and stderr together, at most kMaxOutput bytes
};

constexpr std::size_t kMaxOutput = 1 << 20;

/// A running child: its own process group, stdout and stderr into `fd`.
struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::chrono::steady_clock::time_point start;
  double limit_s = 0;
  Outcome outcome;
  int slot = 0;  ///< which job of run_all it is
};

/// VmData of this process, in bytes (the base the children's data limit adds to).
std::uint64_t vm_data_bytes();

/// Forks a child in its own process group, stdin /dev/null, stdout and stderr into a pipe, at most
/// `data_limit` bytes of data (RLIMIT_DATA; 0: no limit) and a CPU-time backstop; `body` runs in
/// it and must not return. run_all kills it after `limit_s` seconds of wall time.
Child spawn(const std::function<void()>& body, double limit_s, std::uint64_t data_limit);

/// Runs children `make(i)` for i in [0, count), at most `jobs` at once; `done(i, outcome)` sees
/// each outcome as it ends. `make` returning nullopt skips i; once `stop()` is true no more start.
void run_all(int count, int jobs, const std::function<std::optional<Child>(int)>& make,
             const std::function<void(int, Outcome&)>& done, const std::function<bool()>& stop);

}  // namespace strata::fuzz
