#include "children.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <vector>

namespace strata::fuzz {

using Clock = std::chrono::steady_clock;

namespace {

void drain(Child& c) {
  char buf[65536];
  while (c.fd >= 0) {
    const ssize_t n = read(c.fd, buf, sizeof buf);
    if (n > 0) {
      if (c.outcome.output.size() < kMaxOutput) c.outcome.output.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0 || errno != EAGAIN) {
      close(c.fd);
      c.fd = -1;
    }
    return;
  }
}

}  // namespace

std::uint64_t vm_data_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmData:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  return 0;
}

Child spawn(const std::function<void()>& body, double limit_s, std::uint64_t data_limit) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::cout.flush();  // else the child inherits the buffered text and prints it again
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    const int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    if (data_limit > 0) {
      const rlimit data{data_limit, data_limit};
      setrlimit(RLIMIT_DATA, &data);
    }
    const rlim_t cpu = static_cast<rlim_t>(limit_s) + 5;  // a backstop; the parent kills at limit_s
    const rlimit cpu_limit{cpu, cpu + 1};
    setrlimit(RLIMIT_CPU, &cpu_limit);
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    body();
    _exit(111);
  }
  setpgid(pid, pid);
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  Child child;
  child.pid = pid;
  child.fd = fds[0];
  child.start = Clock::now();
  child.limit_s = limit_s;
  return child;
}

void run_all(int count, int jobs, const std::function<std::optional<Child>(int)>& make,
             const std::function<void(int, Outcome&)>& done, const std::function<bool()>& stop) {
  std::vector<Child> running;
  int next = 0;
  while (next < count || !running.empty()) {
    while (static_cast<int>(running.size()) < jobs && next < count && !stop()) {
      const int i = next++;
      if (auto child = make(i)) {
        child->slot = i;
        running.push_back(*child);
      }
    }
    if (stop() && running.empty()) break;
    if (running.empty()) continue;
    std::vector<pollfd> polls;
    for (const auto& c : running)
      if (c.fd >= 0) polls.push_back({c.fd, POLLIN, 0});
    poll(polls.data(), polls.size(), 20);
    for (auto it = running.begin(); it != running.end();) {
      Child& c = *it;
      drain(c);
      const double elapsed = std::chrono::duration<double>(Clock::now() - c.start).count();
      if (elapsed > c.limit_s && !c.outcome.timed_out) {
        c.outcome.timed_out = true;
        kill(-c.pid, SIGKILL);
      }
      rusage usage{};
      int status = 0;
      if (wait4(c.pid, &status, WNOHANG, &usage) != c.pid) {
        ++it;
        continue;
      }
      drain(c);
      kill(-c.pid, SIGKILL);  // anything it left behind
      if (c.fd >= 0) close(c.fd);
      c.outcome.status = status;
      c.outcome.seconds = elapsed;
      c.outcome.max_rss_kb = usage.ru_maxrss;
      done(c.slot, c.outcome);
      it = running.erase(it);
    }
  }
}

}  // namespace strata::fuzz
