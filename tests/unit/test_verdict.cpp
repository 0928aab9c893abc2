#include "test_support.hpp"
// How a job's end is recorded: failure records, the cause among them, and where Gloo listens.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "comm/backends.hpp"
#include "job/verdict.hpp"

namespace fs = std::filesystem;
using strata::FailureRecord;

namespace {
FailureRecord record(int rank, std::optional<int> cause, double time, const char* status = "failed") {
  return FailureRecord{rank, status, "error of rank " + std::to_string(rank), cause, time};
}
}  // namespace

TEST_CASE("verdict: records round-trip through files and a restart clears them") {
  const fs::path dir = fs::temp_directory_path() / ("strata_verdict_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  strata::write_failure_record(dir, record(1, 1, 10.5));
  strata::write_failure_record(dir, record(0, std::nullopt, 11.0, "interrupted"));
  const auto records = strata::read_failure_records(dir);
  REQUIRE(records.size() == 2);
  CHECK(records[0].rank == 0);
  CHECK(records[0].status == "interrupted");
  CHECK_FALSE(records[0].cause_rank.has_value());
  CHECK(records[1].cause_rank == 1);
  CHECK(records[1].time == doctest::Approx(10.5));
  CHECK(records[1].error == "error of rank 1");
  strata::clear_failure_records(dir);
  CHECK(strata::read_failure_records(dir).empty());
  strata::write_failure_record({}, record(2, 2, 1));  // no run directory: nothing, no throw
  fs::remove_all(dir);
}

TEST_CASE("verdict: the cause is the earliest own error, else the earliest blame, never a consequence") {
  // Rank 1 raised at t=5; rank 0 only saw its collective fail (no cause) later.
  CHECK(strata::cause_of({record(0, std::nullopt, 6), record(1, 1, 5)})->rank == 1);
  // An error of a rank's own beats a blame, even a blame recorded earlier.
  CHECK(strata::cause_of({record(0, 2, 1), record(3, 3, 9)})->rank == 3);
  // Two own errors: the first one.
  CHECK(strata::cause_of({record(2, 2, 8), record(1, 1, 7)})->rank == 1);
  // Rank 0 named the silent rank 2; rank 1 named the store (rank 0) later.
  auto blamed = strata::cause_of({record(0, 2, 3), record(1, 0, 4)});
  REQUIRE(blamed.has_value());
  CHECK(blamed->cause_rank == 2);
  // Consequences and interruptions name no cause.
  CHECK_FALSE(strata::cause_of({record(0, std::nullopt, 1), record(1, 1, 1, "interrupted")}).has_value());
  CHECK_FALSE(strata::cause_of({}).has_value());
}

TEST_CASE("verdict: a record keeps the failed rank's phase and step") {
  FailureRecord r = record(1, 1, 2.0);
  r.phase = "train";
  r.step = 3;
  const FailureRecord back = FailureRecord::from_json(r.to_json());
  CHECK(back.phase == "train");
  CHECK(back.step == 3);
  const FailureRecord bare = FailureRecord::from_json(record(0, 0, 1.0).to_json());
  CHECK(bare.phase.empty());
  CHECK_FALSE(bare.step.has_value());
}

TEST_CASE("verdict: beacons carry a child's phase, step, run directory and end to the launcher") {
  strata::RankBeacons beacons(2);
  REQUIRE(beacons.fd() >= 0);
  REQUIRE(beacons.at(1) != nullptr);
  CHECK(beacons.at(2) == nullptr);
  CHECK(std::string(strata::beacon_phase_name(beacons.at(1)->phase.load())) == "setup");
  const pid_t pid = ::fork();
  if (pid == 0) {  // the rank: writes through the shared mapping, then ends without "done"
    strata::RankBeacon* mine = beacons.keep_for_child(1);
    mine->phase.store(strata::beacon_phase_index("train"));
    mine->step.store(7);
    std::strcpy(mine->run_dir, "/runs/a");
    ::_exit(0);
  }
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(std::string(strata::beacon_phase_name(beacons.at(1)->phase.load())) == "train");
  CHECK(beacons.at(1)->step.load() == 7);
  CHECK(beacons.at(1)->done.load() == 0);
  CHECK(beacons.run_dir(1) == fs::path("/runs/a"));
  CHECK(beacons.run_dir(0).empty());
  beacons.reset();
  CHECK(beacons.at(1)->step.load() == 0);
  CHECK(strata::beacon_phase_index("no such phase") == 0);
}

TEST_CASE("verdict: signal names") {
  CHECK(strata::signal_name(9) == "SIGKILL");
  CHECK(strata::signal_name(19) == "SIGSTOP");
  CHECK(strata::signal_name(15) == "SIGTERM");
  CHECK(strata::signal_name(64) == "signal 64");
}

TEST_CASE("gloo interface: the variables, loopback, and the route to the master") {
  ::unsetenv("GLOO_SOCKET_IFNAME");
  ::unsetenv("NCCL_SOCKET_IFNAME");
  strata::ProcessGroupOptions o;
  o.world.world_size = 2;
  o.world.local_world_size = 2;
  o.world.master_port = 29500;
  o.world.master_addr = "127.0.0.1";
  CHECK(strata::detail::gloo_interface(o) == "127.0.0.1");
  o.world.master_addr = "localhost";
  CHECK(strata::detail::gloo_interface(o) == "127.0.0.1");
  // A name that resolves to loopback, on one host: loopback is right.
  o.world.master_addr = "127.0.1.1";
  CHECK(strata::detail::gloo_interface(o) == "127.0.0.1");
  // The job spans hosts and the master's name resolves to loopback here (Debian's /etc/hosts for
  // rank 0's own name): never listen where no peer can connect.
  o.world.local_world_size = 1;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  o.world.master_addr = host;  // resolves to 127.0.x.x on Debian-style hosts; a real address elsewhere
  const auto listening = [&] {
    try {
      return strata::detail::gloo_interface(o);
    } catch (const strata::Error& e) {
      return std::string("error: ") + e.what();
    }
  }();
  CAPTURE(listening);
  CHECK(listening.rfind("127.", 0) != 0);
  CHECK(listening != "::1");
  // The variables win, as in torch.distributed.
  ::setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  CHECK(strata::detail::gloo_interface(o) == "NCCL_SOCKET_IFNAME=lo");
  ::setenv("NCCL_SOCKET_IFNAME", "^docker", 1);  // an exclusion names no interface: the route decides
  CHECK(strata::detail::gloo_interface(o).rfind("NCCL_SOCKET_IFNAME", 0) != 0);
  ::setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  CHECK(strata::detail::gloo_interface(o) == "GLOO_SOCKET_IFNAME=lo");
  ::unsetenv("GLOO_SOCKET_IFNAME");
  ::unsetenv("NCCL_SOCKET_IFNAME");
}
