#include "test_support.hpp"

#include <map>

// The c10d communicator over Gloo on loopback, with real processes: the parent spawns this test
// binary once per rank (fork + exec through posix_spawn, so no LibTorch thread of the parent is
// inherited) running only the hidden child case, and judges the ranks by their exit codes.

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>

#include "comm/backends.hpp"
#include "device/cuda_support.hpp"
#include "comm/process_group.hpp"
#include "strata/errors.hpp"

extern char** environ;

namespace strata {
namespace {

constexpr const char* kScenarioVar = "STRATA_TEST_PG_SCENARIO";
constexpr const char* kChildCase = "process group child rank";

/// A port that was free a moment ago: bind port 0 on loopback, read it, close.
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::optional<std::string>(value) : std::nullopt;
}

/// Runs `scenario` on `world` ranks, each a child process of this binary; returns their exit
/// codes in rank order (-1: killed at the deadline). Never waits longer than `deadline`.
std::vector<int> run_ranks(const std::string& scenario, int world, std::chrono::seconds deadline) {
  const int port = free_port();
  char self[4096];
  const auto n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(n > 0);
  self[n] = '\0';

  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> vars;
    for (char** e = environ; *e; ++e) {
      std::string var = *e;
      auto name = var.substr(0, var.find('='));
      if (name != "RANK" && name != "WORLD_SIZE" && name != "MASTER_ADDR" && name != "MASTER_PORT" &&
          name != kScenarioVar) {
        vars.push_back(var);
      }
    }
    vars.push_back("RANK=" + std::to_string(rank));
    vars.push_back("WORLD_SIZE=" + std::to_string(world));
    vars.push_back("MASTER_ADDR=127.0.0.1");
    vars.push_back("MASTER_PORT=" + std::to_string(port));
    vars.push_back(std::string(kScenarioVar) + "=" + scenario);
    std::vector<std::string> args{self, "--no-skip", std::string("-tc=") + kChildCase, "--minimal"};
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    REQUIRE(::posix_spawn(&pid, self, nullptr, nullptr, argv.data(), envp.data()) == 0);
    pids.push_back(pid);
  }

  std::vector<int> codes(world, -2);
  int running = world;
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (running > 0 && std::chrono::steady_clock::now() < until) {
    for (int r = 0; r < world; ++r) {
      int status = 0;
      if (codes[r] == -2 && ::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --running;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < world; ++r) {
    if (codes[r] != -2) continue;
    ::kill(pids[r], SIGKILL);
    ::waitpid(pids[r], nullptr, 0);
    codes[r] = -1;
  }
  return codes;
}

WorldInfo world_from_test_env() {
  WorldInfo w;
  w.rank = std::stoi(*env("RANK"));
  w.world_size = std::stoi(*env("WORLD_SIZE"));
  w.master_addr = *env("MASTER_ADDR");
  w.master_port = std::stoi(*env("MASTER_PORT"));
  w.launcher = "strata";
  return w;
}

torch::Tensor floats(std::initializer_list<std::int64_t> shape, float value) {
  return torch::full(shape, value, torch::kFloat32);
}

/// Every collective once, with known values; then the counters and the store.
void collectives_rank(const WorldInfo& w) {
  ProcessGroupOptions options;
  options.world = w;
  options.timeout = std::chrono::seconds(20);
  auto comm = make_process_group_comm(options);
  const int n = w.world_size;
  const int r = w.rank;
  REQUIRE(comm->rank() == r);
  REQUIRE(comm->world_size() == n);

  // Setup: the initial parameter broadcast.
  comm->set_phase(CommPhase::kSetup);
  auto params = floats({12}, static_cast<float>(r + 1));
  comm->broadcast(params, 0);
  CHECK(torch::equal(params, floats({12}, 1)));

  comm->set_phase(CommPhase::kTrain);
  const auto base = torch::arange(12, torch::kFloat32);
  const auto sum = base * n + n * (n - 1) / 2.0;
  auto t = base + r;
  comm->all_reduce(t, ReduceOp::kSum);
  CHECK(torch::allclose(t, sum));
  t = base + r;
  comm->all_reduce(t, ReduceOp::kAvg);
  CHECK(torch::allclose(t, base + (n - 1) / 2.0));
  t = base + r;
  comm->all_reduce(t, ReduceOp::kMax);
  CHECK(torch::allclose(t, base + (n - 1)));
  // A non-contiguous tensor goes through a contiguous copy and comes back in place.
  auto strided = (base.view({3, 4}) + r).t();
  REQUIRE_FALSE(strided.is_contiguous());
  comm->all_reduce(strided, ReduceOp::kSum);
  CHECK(torch::allclose(strided, sum.view({3, 4}).t()));

  const int chunk = 12 / n;
  auto slice = torch::empty({chunk}, torch::kFloat32);
  comm->reduce_scatter(slice, base + r, ReduceOp::kSum);
  CHECK(torch::allclose(slice, sum.slice(0, r * chunk, (r + 1) * chunk)));
  comm->reduce_scatter(slice, base + r, ReduceOp::kAvg);
  CHECK(torch::allclose(slice, (base + (n - 1) / 2.0).slice(0, r * chunk, (r + 1) * chunk)));

  auto gathered = torch::empty({n, 4}, torch::kFloat32);
  comm->all_gather(gathered, floats({4}, static_cast<float>(r)));
  CHECK(torch::equal(gathered, torch::arange(n, torch::kFloat32).view({n, 1}).expand({n, 4})));

  // All-to-all: rank r sends q * 10 + r to rank q; it receives q's r * 10 + q, in rank order; int8
  // (a quantized payload) travels as it is.
  auto sent = torch::empty({n, 2}, torch::kInt8);
  for (int q = 0; q < n; ++q) sent[q].fill_(q * 10 + r);
  auto received = torch::empty({n, 2}, torch::kInt8);
  comm->all_to_all(received, sent);
  for (int q = 0; q < n; ++q) CHECK(torch::equal(received[q], torch::full({2}, r * 10 + q, torch::kInt8)));
  auto mismatched = torch::empty({n, 3}, torch::kInt8);
  CHECK_THROWS_AS(comm->all_to_all(mismatched, sent), Error);  // refused before anything is sent

  auto from_first = floats({12}, static_cast<float>(r + 1));
  comm->broadcast(from_first, 0);
  CHECK(torch::equal(from_first, floats({12}, 1)));
  auto from_last = floats({12}, static_cast<float>(r + 1));
  comm->broadcast(from_last, n - 1);
  CHECK(torch::equal(from_last, floats({12}, static_cast<float>(n))));

  // Two collectives in flight, waited in reverse order; a second wait is a no-op.
  auto a = floats({12}, static_cast<float>(r + 1));
  auto b = floats({12}, static_cast<float>(r + 1));
  auto wa = comm->all_reduce(a, ReduceOp::kSum, true);
  auto wb = comm->all_reduce(b, ReduceOp::kMax, true);
  wb->wait();
  wa->wait();
  wa->wait();
  CHECK(torch::equal(a, floats({12}, n * (n + 1) / 2.0f)));
  CHECK(torch::equal(b, floats({12}, static_cast<float>(n))));
  comm->barrier();

  // docs/user-guide.md: all-reduce 2(n-1)/n*S, reduce-scatter and all-gather (n-1)/n*S with S the full
  // tensor, all-to-all (n-1)/n*S with S what a rank sends, broadcast S. 48 bytes = 12 floats.
  const auto train = comm->counters(CommPhase::kTrain);
  // all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, barrier
  CHECK(train.calls == 6 + 2 + 1 + 1 + 2 + 1);
  const std::int64_t reduced = 6 * 48, scattered = 2 * 48, gathered_bytes = 16 * n, exchanged = 2 * n,
                     broadcast = 2 * 48;
  CHECK(train.payload_bytes == reduced + scattered + gathered_bytes + exchanged + broadcast);
  const double ar = 2.0 * (n - 1) / n, gs = static_cast<double>(n - 1) / n;
  CHECK(train.bus_bytes ==
        doctest::Approx(reduced * ar + (scattered + gathered_bytes + exchanged) * gs + broadcast).epsilon(1e-12));
  CHECK(train.time_s > 0);
  const auto setup = comm->counters(CommPhase::kSetup);
  CHECK(setup.calls == 1);
  CHECK(setup.payload_bytes == 48);
  CHECK(setup.bus_bytes == 48.0);
  CHECK(setup.time_s > 0);
  CHECK(comm->counters(CommPhase::kEval).calls == 0);

  // The store: one value from rank 0, one per rank; store traffic is not counted.
  if (r == 0) comm->store_set("run_dir", "/tmp/strata-run");
  CHECK(comm->store_get("run_dir") == "/tmp/strata-run");
  comm->store_set("rank/" + std::to_string(r), std::to_string(10 * r));
  for (int q = 0; q < n; ++q) CHECK(comm->store_get("rank/" + std::to_string(q)) == std::to_string(10 * q));
  CHECK(comm->counters(CommPhase::kTrain).calls == train.calls);

  // Rank 0 hosts the store: nobody leaves before everyone is done with it.
  comm->barrier();
}

/// Rank 1 dies right after the rendezvous; rank 0's next collective must fail with context.
void peer_lost_rank(const WorldInfo& w) {
  ProcessGroupOptions options;
  options.world = w;
  options.timeout = std::chrono::seconds(5);
  auto comm = make_process_group_comm(options);
  if (w.rank == 1) {
    comm->store_get("go");
    std::_Exit(0);  // a crash: no destructor, no goodbye
  }
  comm->store_set("go", "1");
  auto t = floats({12}, 1);
  try {
    comm->all_reduce(t);
    FAIL("all_reduce with a lost peer returned");
  } catch (const Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("rank 0 of 2") != std::string::npos);
    CHECK(message.find("all_reduce of 48 bytes") != std::string::npos);
    CHECK(message.find("Exception raised from") == std::string::npos);
    CHECK_FALSE(e.fix().empty());
  }
}

}  // namespace

TEST_CASE("process group: two ranks that claim one GPU for an NCCL communicator are refused, naming both and their binding") {
  // What make_nccl does before NCCL builds its communicator (which would fail with "Duplicate GPU"
  // and name no binding): each rank claims its GPU's UUID in the group's store.
  auto store = c10::make_intrusive<c10d::HashStore>();
  test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "0");
  ProcessGroupOptions o;
  o.backend = "nccl";
  o.world.world_size = 3;
  o.world.local_world_size = 3;
  o.world.rank = 0;
  CHECK_NOTHROW(detail::claim_gpu(*store, "GPU-aaaa", o));
  o.world.rank = 1;
  CHECK_NOTHROW(detail::claim_gpu(*store, "GPU-bbbb", o));  // another GPU: fine
  o.world.rank = 2;
  try {
    detail::claim_gpu(*store, "GPU-aaaa", o);
    FAIL("a second claim of GPU-aaaa was accepted");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("rank 2") != std::string::npos);
    CHECK(what.find("rank 0") != std::string::npos);
    CHECK(what.find("GPU-aaaa") != std::string::npos);
    CHECK(what.find("CUDA_VISIBLE_DEVICES=0") != std::string::npos);
    CHECK(std::string(e.fix()).find("CUDA_VISIBLE_DEVICES") != std::string::npos);
  }
  // Another communicator's claims are its own (each group's store has its own prefix).
  auto other = c10::make_intrusive<c10d::HashStore>();
  CHECK_NOTHROW(detail::claim_gpu(*other, "GPU-aaaa", o));
}

TEST_CASE("process group: the nccl backend comes from libstrata_cuda, which a process without a visible GPU does not open") {
  // CTest hides the GPUs from the CPU tests (CUDA_VISIBLE_DEVICES=), so main() left it closed.
  auto store = c10::make_intrusive<c10d::HashStore>();
  ProcessGroupOptions o;
  o.backend = "nccl";
  o.world.world_size = 2;
  o.world.local_world_size = 2;
  torch::Device device(torch::kCUDA);
  if (!cuda_support::loaded()) {
    CHECK_FALSE(cuda_support::why_absent().empty());
    try {
      (void)detail::make_nccl(o, store, device);
      FAIL("make_nccl built a backend without LibTorch's CUDA library");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find("rank 0 of 2") != std::string::npos);
      CHECK(what.find("not loaded") != std::string::npos);
      CHECK(what.find(cuda_support::why_absent()) != std::string::npos);
      CHECK(std::string(e.fix()).find("gloo") != std::string::npos);
    }
  }
#ifdef STRATA_HAVE_CUDA_LIBRARY
  // Opened as load_at_start() opens it, the library registers its factory, which then answers for
  // this machine: no GPU is visible to the process. (Run by hand where a GPU is visible, the
  // factory would build a communicator waiting for a second rank: not here.)
  if (c10::cuda::device_count() > 0) return;
  REQUIRE_MESSAGE(::dlopen(cuda_support::library_path().c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr, ::dlerror());
  try {
    (void)detail::make_nccl(o, store, device);
    FAIL("an NCCL backend was built with no GPU visible");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("needs CUDA device 0") != std::string::npos);
    CHECK(what.find("0 are visible") != std::string::npos);
  }
#endif
}

TEST_CASE("process group child rank" * doctest::skip()) {
  auto scenario = env(kScenarioVar);
  if (!scenario) return;  // only meaningful when spawned by run_ranks
  const auto world = world_from_test_env();
  if (*scenario == "collectives") {
    collectives_rank(world);
  } else if (*scenario == "peer_lost") {
    peer_lost_rank(world);
  } else {
    FAIL("unknown scenario " << *scenario);
  }
}

TEST_CASE("process group: gloo collectives, counters and store on 2 and 3 ranks") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    const auto codes = run_ranks("collectives", world, std::chrono::seconds(30));
    for (int rank = 0; rank < world; ++rank) {
      CAPTURE(rank);
      CHECK(codes[rank] == 0);  // -1: killed at the deadline
    }
  }
}

TEST_CASE("process group: a lost peer fails the collective naming rank, op and bytes") {
  const auto codes = run_ranks("peer_lost", 2, std::chrono::seconds(30));
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
}

namespace {
/// What a rank alone at a rendezvous (3 s timeout) reports; it must give up within 10 s.
struct LoneRendezvous {
  int port = 0;
  std::string message;
  std::string fix;
};
LoneRendezvous rendezvous_alone(int rank) {
  ProcessGroupOptions options;
  options.world.rank = rank;
  options.world.world_size = 2;
  options.world.master_port = free_port();
  options.timeout = std::chrono::seconds(3);
  LoneRendezvous out{options.world.master_port, {}, {}};
  const auto start = std::chrono::steady_clock::now();
  try {
    make_process_group_comm(options);
    FAIL("rendezvous of rank " << rank << " alone succeeded");
  } catch (const Error& e) {
    out.message = e.what();
    out.fix = e.fix();
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  return out;
}
}  // namespace

TEST_CASE("process group: rank 0 gives up when a rank never shows up") {
  const auto r = rendezvous_alone(0);
  INFO(r.message);
  CHECK(r.message.find("rank 0 of 2") != std::string::npos);
  CHECK(r.message.find("127.0.0.1:" + std::to_string(r.port)) != std::string::npos);
  CHECK(r.message.find("3000 ms") != std::string::npos);
  CHECK(r.message.find("Exception raised from") == std::string::npos);
  CHECK(r.fix.find("MASTER_PORT") != std::string::npos);
}

TEST_CASE("process group: a rank gives up when rank 0's store is not there") {
  const auto r = rendezvous_alone(1);
  INFO(r.message);
  CHECK(r.message.find("rank 1 of 2") != std::string::npos);
  CHECK(r.message.find("127.0.0.1:" + std::to_string(r.port)) != std::string::npos);
  CHECK(r.message.find("Exception raised from") == std::string::npos);
}

TEST_CASE("process group: one rank is its own world and bad arguments are named") {
  ProcessGroupOptions options;
  options.world.master_port = free_port();
  options.timeout = std::chrono::seconds(10);
  auto comm = make_process_group_comm(options);
  auto t = torch::arange(4, torch::kFloat32);
  comm->all_reduce(t, ReduceOp::kAvg);
  CHECK(torch::equal(t, torch::arange(4, torch::kFloat32)));
  auto half = torch::empty({2}, torch::kFloat32);
  CHECK_THROWS_WITH_AS(comm->reduce_scatter(half, t), doctest::Contains("reduce_scatter needs output numel * world size == input numel"), Error);
  CHECK_THROWS_WITH_AS(comm->broadcast(t, 1), doctest::Contains("broadcast root 1 is not a rank"), Error);
  const auto c = comm->counters(CommPhase::kSetup);
  CHECK(c.calls == 1);
  CHECK(c.payload_bytes == 16);
  CHECK(c.bus_bytes == 0.0);

  ProcessGroupOptions bad = options;
  bad.world.rank = 2;
  CHECK_THROWS_WITH_AS(make_process_group_comm(bad), doctest::Contains("rank must be in 0..0, got 2"), Error);
  bad = options;
  bad.backend = "mpi";
  CHECK_THROWS_WITH_AS(make_process_group_comm(bad), doctest::Contains("available: gloo, nccl"), Error);
}

TEST_CASE("process group: communicators carry their names, count what they issued, and meet at store barriers") {
  ProcessGroupOptions options;
  options.world.master_port = free_port();
  options.timeout = std::chrono::seconds(10);
  auto comm = make_process_group_comm(options);
  CHECK(comm->group_name() == "world");
  CHECK(comm->skips_collectives());
  auto sub = std::dynamic_pointer_cast<ProcessGroupComm>(comm->subgroup({0}));
  REQUIRE(sub != nullptr);
  CHECK(sub->group_name() == "subgroup0:0");  // the same name on every member: position and ranks
  auto t = torch::arange(4, torch::kFloat32);
  comm->set_phase(CommPhase::kTrain);
  comm->all_reduce(t, ReduceOp::kSum);
  sub->all_gather(t, t.narrow(0, 0, 4));
  const auto progress = comm->progress_source()();
  CHECK(progress.issued == 2);
  std::map<std::string, std::string> last(progress.last.begin(), progress.last.end());
  CHECK(last.size() == 2);
  CHECK(last.at("rank 0 of 1") == "all_reduce #1 of 16 bytes");
  CHECK(last.at("rank 0 of 1 (subgroup [0])") == "all_gather #1 of 16 bytes");
  comm->store_barrier("one", std::chrono::seconds(5));  // one rank: there at once
  comm->store_barrier("two", std::chrono::seconds(5));

  ProcessGroupOptions forced = options;
  forced.world.master_port = free_port();
  forced.force_collectives = true;
  CHECK_FALSE(make_process_group_comm(forced)->skips_collectives());
}

TEST_CASE("process group: nccl without a GPU is a clear error") {
  if (torch::cuda::is_available()) return;  // the GPU path is exercised on GPU machines
  ProcessGroupOptions options;
  options.world.master_port = free_port();
  options.backend = "nccl";
  options.device = torch::Device(torch::kCUDA, 0);
  options.timeout = std::chrono::seconds(10);
  CHECK_THROWS_WITH_AS(make_process_group_comm(options), doctest::Contains("backend \"nccl\""), Error);
}

}  // namespace strata

TEST_CASE("process group: the flight recorder's dump lands in the run directory") {
  // c10d writes a dump through the writer registered for the process (NCCL's watchdog does on a
  // collective timeout); the run directory gets it, and a run without a dump keeps no directory.
  const auto dir = std::filesystem::temp_directory_path() / ("strata_trace_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto file = strata::direct_flight_recorder(dir, 3);
  CHECK(file == dir / "comm_trace" / "rank_3");
  CHECK_FALSE(std::filesystem::exists(dir / "comm_trace"));
  CHECK(strata::direct_flight_recorder(dir, 3) == file);  // once per process
  c10d::DebugInfoWriter::getWriter(3).write("trace");
  std::ifstream in(file);
  std::string text;
  std::getline(in, text);
  CHECK(text == "trace");
  std::filesystem::remove_all(dir);
}
