// The rendezvous of a job: the options checked, the job's TCPStore (hosted by rank 0, or by
// torchrun's agent) and its namespaces, the job's Gloo or NCCL process group, and the first barrier
// after which every rank is known to be up. Includes c10d headers: see dist/process_group.cpp.

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dist/backends.hpp"
#include "dist/c10d_comm.hpp"
#include "dist/comm_errors.hpp"
#include "strata/errors.hpp"

namespace strata {

namespace {

std::string store_options_stage(const ProcessGroupOptions& o) {
  if (o.world.agent_store) return "reach the store of torchrun's agent";
  return o.world.rank == 0 ? "gather all ranks in its store" : "reach rank 0's store";
}

void validate(const ProcessGroupOptions& o) {
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

}  // namespace

void detail::C10dComm::connect_barrier() { backend_->barrier(barrier_options())->wait(options_.timeout); }

std::unique_ptr<ProcessGroupComm> make_process_group_comm(const ProcessGroupOptions& options) {
  using detail::throw_rendezvous_error;
  validate(options);
  ProcessGroupOptions o = options;

  // Rendezvous: rank 0 hosts the TCPStore and (waitWorkers) returns only when every rank has
  // connected; the others retry connecting until the timeout. Under torchrun with
  // TORCHELASTIC_USE_AGENT_STORE=True its agent already hosts a store at MASTER_ADDR:MASTER_PORT
  // (binding there would fail): every rank is a client, and the first barrier gathers them.
  c10::intrusive_ptr<c10d::Store> root;
  if (o.world.agent_store) {
    const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
    o.store_prefix = std::string("strata/attempt_") + (attempt != nullptr ? attempt : "0");
  }
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(o.world.master_port);
    store_options.isServer = o.world.rank == 0 && !o.world.agent_store;
    store_options.numWorkers = static_cast<std::size_t>(o.world.world_size);
    store_options.waitWorkers = !o.world.agent_store;
    store_options.timeout = o.timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(o.world.master_addr, store_options);
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
