// The rendezvous of a job: the options checked, the job's TCPStore (hosted by rank 0, or by
// torchrun's agent) and its namespaces, the job's Gloo or NCCL process group, and the first barrier
// after which every rank is known to be up. Includes c10d headers: see comm/process_group.cpp.

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "comm/backends.hpp"
#include "comm/c10d_comm.hpp"
#include "comm/comm_errors.hpp"
#include "comm/job_guard.hpp"
#include "strata/errors.hpp"
#include "strata/logger.hpp"

namespace strata {

namespace {

std::string store_options_stage(const ProcessGroupOptions& o) {
  if (o.world.agent_store) return "reach the store of torchrun's agent";
  return o.world.rank == 0 ? "gather all ranks in its store" : "reach rank 0's store";
}

void validate_group_options(const ProcessGroupOptions& o) {
  const auto& w = o.world;
  auto bad = [&](const std::string& what) {
    throw Error("process group options: " + what, "fix the launcher's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT");
  };
  if (w.world_size < 1) bad("world_size must be >= 1, got " + std::to_string(w.world_size));
  if (w.rank < 0 || w.rank >= w.world_size) {
    bad("rank must be in 0.." + std::to_string(w.world_size - 1) + ", got " + std::to_string(w.rank));
  }
  if (w.master_port < 1 || w.master_port > 65535) bad("master_port must be in 1..65535, got " + std::to_string(w.master_port));
  if (w.master_addr.empty()) bad("master_addr is empty");
  if (o.backend != "gloo" && o.backend != "nccl") {
    throw Error("unknown communication backend '" + o.backend + "'; available: gloo, nccl");
  }
  if (o.timeout.count() <= 0) bad("timeout must be positive, got " + std::to_string(o.timeout.count()) + " ms");
}

/// A socket listening at `host`:`port` for rank 0's store to adopt, so that the store is reachable
/// only where the ranks connect; -1 when `host` is not an address of this host (a NAT or service
/// address) or, in a job that spans hosts, resolves to loopback here (then c10d listens on every
/// interface). Throws when the port is taken.
int listen_socket(const std::string& host, int port, bool spans_hosts) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const bool loopback =
        a->ai_family == AF_INET
            ? (ntohl(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127
            : a->ai_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (spans_hosts && loopback) continue;  // this host's name as Debian maps it: the peers connect elsewhere
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // as c10d: a port in TIME_WAIT is free
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16384) == 0) return fd;
    const int error = errno;
    ::close(fd);
    if (error == EADDRINUSE) {
      throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + ": " + std::strerror(error));
    }
  }
  return -1;
}

/// What tells this job (and attempt) from another that used the same secret, the same for every
/// rank: the store's MASTER_ADDR:MASTER_PORT, and where set, Slurm's job and step, torchrun's run id
/// and strata's launcher's attempt. A message sealed in one job does not open in another.
std::string job_identity(const WorldInfo& w) {
  std::string id = w.master_addr + ":" + std::to_string(w.master_port);
  const auto add = [&](const char* tag, const char* name) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') id.append("/").append(tag).append(value);
  };
  if (const char* job = std::getenv("SLURM_JOB_ID"); job != nullptr && *job != '\0') {
    const char* step = std::getenv("SLURM_STEP_ID");
    if (step == nullptr) step = std::getenv("SLURM_STEPID");
    id.append("/slurm=").append(job).append(".").append(step != nullptr ? step : "");
  }
  add("torchelastic=", "TORCHELASTIC_RUN_ID");
  add("strata=", detail::kAttemptIdVariable);
  return id;
}

}  // namespace

void detail::C10dComm::connect_barrier() { backend_->barrier(barrier_options())->wait(options_.timeout); }

std::unique_ptr<ProcessGroupComm> make_process_group_comm(const ProcessGroupOptions& options) {
  using detail::throw_rendezvous_error;
  validate_group_options(options);
  ProcessGroupOptions o = options;

  // Rendezvous: rank 0 hosts the TCPStore and (waitWorkers) returns only when every rank has
  // connected; the others retry connecting until the timeout. Under torchrun with
  // TORCHELASTIC_USE_AGENT_STORE=True its agent already hosts a store at MASTER_ADDR:MASTER_PORT
  // (binding there would fail): every rank is a client, and the first barrier gathers them.
  c10::intrusive_ptr<c10d::Store> root;
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (o.world.agent_store) o.store_prefix = std::string("strata/attempt_") + (attempt != nullptr ? attempt : "0");
  if (o.job_secret.empty()) o.job_secret = detail::read_job_secret();
  o.seal_scope = o.store_prefix + "/" + (attempt != nullptr ? attempt : "0") + "/" + job_identity(o.world);
  if (o.job_secret.empty() && !detail::one_host(o.world) && o.world.rank == 0) {
    Logger(o.world.rank, o.world.world_size)
        .warn("the job's store at " + detail::endpoint(o.world) +
              " takes orders from any process that reaches it: a stranger on the network could end the job or "
              "write its verdict. Set STRATA_JOB_SECRET for every rank (one value per job, e.g. from `openssl rand "
              "-hex 16`, or a file only you can read named by STRATA_JOB_SECRET_FILE) so that ranks act only on the "
              "job's own messages");
  }
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(o.world.master_port);
    store_options.isServer = o.world.rank == 0 && !o.world.agent_store;
    store_options.numWorkers = static_cast<std::size_t>(o.world.world_size);
    store_options.waitWorkers = !o.world.agent_store;
    store_options.timeout = o.timeout;
    // c10d's server listens on every interface; rank 0 listens where the ranks connect instead:
    // loopback for a job of one host, MASTER_ADDR's address when it is this host's.
    if (store_options.isServer) {
      const int fd = listen_socket(detail::store_host(o.world), o.world.master_port, !detail::one_host(o.world));
      if (fd >= 0) store_options.masterListenFd = fd;
    }
    auto tcp = c10::make_intrusive<c10d::TCPStore>(detail::store_host(o.world), store_options);
    root = c10::make_intrusive<c10d::PrefixStore>(o.store_prefix, tcp);
  } catch (...) {
    throw_rendezvous_error(o, store_options_stage(o));
  }
  // Separate namespaces: the process group's own keys and store_set/store_get's.
  auto pg_store = c10::make_intrusive<c10d::PrefixStore>("pg", root);
  auto kv_store = c10::make_intrusive<c10d::PrefixStore>("kv", root);

  c10::intrusive_ptr<c10d::Backend> backend;
  if (o.backend == "nccl") {
    // Configuration errors (no NCCL, no GPU) are not rendezvous failures: report them as they are.
    try {
      backend = detail::make_nccl(o, pg_store, o.device);
    } catch (const Error&) {
      throw;
    } catch (...) {
      throw_rendezvous_error(o, "create the nccl process group");
    }
  } else {
    std::string listening;
    try {
      listening = detail::gloo_interface(o);
      backend = detail::make_gloo(o, pg_store);
    } catch (const Error&) {
      throw;
    } catch (...) {
      throw_rendezvous_error(o, "create the gloo process group", listening);
    }
  }

  std::vector<int> members(static_cast<std::size_t>(o.world.world_size));
  std::iota(members.begin(), members.end(), 0);
  auto comm = std::make_unique<detail::C10dComm>(o, kv_store, pg_store, backend, std::move(members), o.world.rank,
                                                 detail::rank_name(o.world), std::make_shared<detail::Accounting>());
  try {
    comm->connect_barrier();
  } catch (...) {
    throw_rendezvous_error(o, "pass the first barrier");
  }
  return comm;
}

}  // namespace strata
