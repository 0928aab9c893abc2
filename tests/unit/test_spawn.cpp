#include "test_support.hpp"
// strata's own launcher. The ranks are this very test binary: spawn_and_supervise execs
// /proc/self/exe, here with arguments that run only the "spawn child" test case, which acts out
// the behaviour named by STRATA_TEST_CHILD_MODE (inherited from the test through the environment)
// and does nothing when the test binary runs normally.

#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "launch/spawn.hpp"
#include "job/world.hpp"
#include "strata/errors.hpp"

namespace {

using strata::test::ScopedEnv;

using namespace std::chrono_literals;

std::string env_or(const char* name, const std::string& fallback = "") {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

/// Waits up to `timeout` for `path` to exist.
bool wait_for_file(const std::filesystem::path& path, std::chrono::seconds timeout = 20s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// ---- the child side ----------------------------------------------------------------------

/// Marks that this rank is up (and, for "ignore_term", that it now ignores SIGTERM).
void mark_started(int rank) {
  std::ofstream(std::filesystem::path(env_or("STRATA_TEST_CHILD_DIR")) / ("rank" + std::to_string(rank))) << "up";
}

/// check_env: the variables the spawner promises; the exit code says which check failed.
int check_child_environment(const strata::WorldInfo& w) {
  char byte = 0;
  const std::pair<bool, const char*> checks[] = {
      {w.launcher == "strata", "launcher"},
      {std::to_string(w.world_size) == env_or("STRATA_TEST_EXPECT_WORLD"), "WORLD_SIZE"},
      {w.local_rank == w.rank && w.local_world_size == w.world_size, "LOCAL_RANK/LOCAL_WORLD_SIZE"},
      {w.master_addr == "127.0.0.1", "MASTER_ADDR"},
      {std::to_string(w.master_port) == env_or("STRATA_TEST_EXPECT_PORT"), "MASTER_PORT"},
      {env_or("OMP_WAIT_POLICY") == env_or("STRATA_TEST_EXPECT_WAIT_POLICY"), "OMP_WAIT_POLICY"},
      {::read(STDIN_FILENO, &byte, 1) == 0, "stdin from /dev/null"},
  };
  for (int i = 0; i < static_cast<int>(std::size(checks)); ++i) {
    if (!checks[i].first) {
      std::fprintf(stderr, "rank %d: wrong %s\n", w.rank, checks[i].second);
      return 10 + i;
    }
  }
  mark_started(w.rank);
  return 0;
}

[[noreturn]] void act_as_child(const std::string& mode) {
  const strata::WorldInfo w = strata::world_from_environment().value();
  if (mode == "check_env") std::_Exit(check_child_environment(w));
  if (mode == "ok") std::_Exit(0);
  if (mode == "fail_rank1" && w.rank == 1) std::_Exit(3);
  if (mode == "kill_self_rank2" && w.rank == 2) std::raise(SIGKILL);
  if (mode == "ignore_term") {
    // Rank 0 survives SIGTERM, so the launcher must escalate to SIGKILL after the grace period;
    // rank 1 fails once rank 0 is known to ignore SIGTERM.
    if (w.rank == 0) std::signal(SIGTERM, SIG_IGN);
    if (w.rank == 1) {
      wait_for_file(std::filesystem::path(env_or("STRATA_TEST_CHILD_DIR")) / "rank0");
      std::_Exit(4);
    }
  }
  mark_started(w.rank);
  std::this_thread::sleep_for(60s);  // the launcher must stop us long before this
  std::_Exit(0);
}

// ---- the launcher side -------------------------------------------------------------------

strata::SpawnOptions child_options(int nproc) {
  strata::SpawnOptions options;
  options.args = {"--test-case=spawn child", "--quiet"};
  options.nproc = nproc;
  options.grace = 1s;
  return options;
}

struct Outcome {
  int code = -1;
  double seconds = 0;
};

Outcome spawn_children(const strata::SpawnOptions& options, const std::string& mode) {
  ScopedEnv child_mode("STRATA_TEST_CHILD_MODE", mode);
  const auto start = std::chrono::steady_clock::now();
  Outcome out;
  out.code = strata::spawn_and_supervise(options);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

/// True when this process has no child at all, not even an unreaped zombie.
bool no_children_left() {
  errno = 0;
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

}  // namespace

TEST_CASE("spawn child") {
  // Only the ranks started by the tests below do something; a normal test run passes here.
  if (env_or("STRATA_SPAWNED") != "1" || env_or("STRATA_TEST_CHILD_MODE").empty()) return;
  std::signal(SIGTERM, SIG_DFL);  // doctest's crash handler would otherwise report SIGTERM first
  act_as_child(env_or("STRATA_TEST_CHILD_MODE"));
}

TEST_CASE("spawn: every rank gets the torchrun-style environment and all succeed") {
  strata::test::TempDir dir;
  ScopedEnv child_dir("STRATA_TEST_CHILD_DIR", dir.path().string());
  auto options = child_options(2);
  options.master_port = strata::free_port();
  ScopedEnv world("STRATA_TEST_EXPECT_WORLD", "2");
  ScopedEnv port("STRATA_TEST_EXPECT_PORT", std::to_string(options.master_port));
  SUBCASE("the launcher sets OMP_WAIT_POLICY=PASSIVE") {
    const char* user = std::getenv("OMP_WAIT_POLICY");
    ScopedEnv expect("STRATA_TEST_EXPECT_WAIT_POLICY", user != nullptr ? user : "PASSIVE");
    CHECK(spawn_children(options, "check_env").code == 0);
  }
  SUBCASE("a user's OMP_WAIT_POLICY wins") {
    ScopedEnv policy("OMP_WAIT_POLICY", "ACTIVE");
    ScopedEnv expect("STRATA_TEST_EXPECT_WAIT_POLICY", "ACTIVE");
    CHECK(spawn_children(options, "check_env").code == 0);
  }
  CHECK(std::filesystem::exists(dir.path() / "rank0"));
  CHECK(std::filesystem::exists(dir.path() / "rank1"));
  CHECK(no_children_left());
}

TEST_CASE("spawn: all ranks exiting 0 gives 0") {
  auto out = spawn_children(child_options(3), "ok");
  CHECK(out.code == 0);
  CHECK(no_children_left());
}

TEST_CASE("spawn: the first failing rank stops the others and gives its status") {
  strata::test::TempDir dir;
  ScopedEnv child_dir("STRATA_TEST_CHILD_DIR", dir.path().string());
  auto out = spawn_children(child_options(3), "fail_rank1");
  CHECK(out.code == 3);
  CHECK(out.seconds < 30);  // the others sleep 60 s unless stopped
  CHECK(no_children_left());
}

TEST_CASE("spawn: a rank killed by a signal gives 128 + signal") {
  strata::test::TempDir dir;
  ScopedEnv child_dir("STRATA_TEST_CHILD_DIR", dir.path().string());
  auto out = spawn_children(child_options(3), "kill_self_rank2");
  CHECK(out.code == 128 + SIGKILL);
  CHECK(out.seconds < 30);
  CHECK(no_children_left());
}

TEST_CASE("spawn: ranks that ignore SIGTERM are killed after the grace period") {
  strata::test::TempDir dir;
  ScopedEnv child_dir("STRATA_TEST_CHILD_DIR", dir.path().string());
  auto out = spawn_children(child_options(2), "ignore_term");
  CHECK(out.code == 4);
  CHECK(out.seconds >= 1.0);  // rank 0 outlived SIGTERM for the grace period
  CHECK(out.seconds < 30);
  CHECK(no_children_left());
}

TEST_CASE("spawn: SIGTERM to the launcher stops the ranks and gives 128 + SIGTERM") {
  strata::test::TempDir dir;
  ScopedEnv child_dir("STRATA_TEST_CHILD_DIR", dir.path().string());
  // Signal the launcher once every rank is up, i.e. while it supervises.
  std::thread killer([&] {
    if (wait_for_file(dir.path() / "rank0") && wait_for_file(dir.path() / "rank1")) ::kill(::getpid(), SIGTERM);
  });
  auto out = spawn_children(child_options(2), "sleep");
  killer.join();
  CHECK(out.code == 128 + SIGTERM);
  CHECK(out.seconds < 30);
  CHECK(no_children_left());
}

TEST_CASE("spawn: bad options are usage errors") {
  auto options = child_options(0);
  CHECK_THROWS_AS(strata::spawn_and_supervise(options), strata::UsageError);
  options.nproc = 1;
  options.master_port = 70000;
  CHECK_THROWS_AS(strata::spawn_and_supervise(options), strata::UsageError);
}

TEST_CASE("spawn: free_port returns a port that can be bound") {
  const int port = strata::free_port("127.0.0.1");
  REQUIRE(port > 0);
  REQUIRE(port <= 65535);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  ::close(fd);
  // 192.0.2.1 (TEST-NET-1) is no address of this machine: binding fails without any DNS lookup.
  CHECK_THROWS_AS(strata::free_port("192.0.2.1"), strata::Error);
}
