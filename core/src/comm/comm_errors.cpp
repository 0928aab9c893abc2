// The error text of the c10d communicator (comm/comm_errors.hpp): the rendezvous, collective, store
// and group-creation failures, and c10d's messages cleaned of LibTorch's stack text.

#include "comm/comm_errors.hpp"

#include <fmt/format.h>

#include <c10/util/Exception.h>

namespace strata::detail {

std::string clean_message(const std::exception& e) {
  std::string text = e.what();
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) text = c10->what_without_backtrace();
  if (auto at = text.find("Exception raised from"); at != std::string::npos) text.erase(at);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '.')) text.pop_back();
  return text;
}

std::string current_exception_message() {
  try {
    throw;
  } catch (const std::exception& e) {
    return clean_message(e);
  } catch (...) {
    return "unknown error";
  }
}

std::string endpoint(const WorldInfo& w) { return w.master_addr + ":" + std::to_string(w.master_port); }

std::string rank_name(const WorldInfo& w) {
  return "rank " + std::to_string(w.rank) + " of " + std::to_string(w.world_size);
}

void throw_rendezvous_error(const ProcessGroupOptions& o, const std::string& stage, const std::string& listening) {
  std::string fix = "start all " + std::to_string(o.world.world_size) +
                    " ranks with the same MASTER_ADDR and MASTER_PORT; check that rank 0 is running, that the port "
                    "is reachable from every host and not used by another job, and raise [distributed] timeout_s "
                    "if ranks start slowly";
  if (!listening.empty())
    fix += "; this rank's Gloo listens on " + listening +
           ": where hosts share another network, set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to its interface";
  throw DistributedError(o.world.rank, "rendezvous",
                         rank_name(o.world) + " could not " + stage + " at " + endpoint(o.world) + " within the " +
                             std::to_string(o.timeout.count()) + " ms timeout: " + current_exception_message(),
                         fix);
}

DistributedError collective_failed(int rank, const std::string& who, const std::string& op, std::int64_t bytes,
                                   std::chrono::milliseconds timeout) {
  return DistributedError(rank, op,
                          who + ": " + op + " of " + std::to_string(bytes) + " bytes failed: " +
                              current_exception_message(),
                          "another rank probably exited or stopped calling collectives in the same order; read the "
                          "first error of every rank (a lost peer shows there); the timeout is " +
                              std::to_string(timeout.count()) + " ms");
}

DistributedError collective_not_started(int rank, const std::string& who, const std::string& op,
                                        std::int64_t bytes) {
  return DistributedError(rank, op,
                          who + ": " + op + " of " + std::to_string(bytes) + " bytes could not start: " +
                              current_exception_message());
}

Error store_error(const std::string& who, const char* what, const std::string& key, const WorldInfo& world,
                  std::chrono::milliseconds timeout) {
  return Error(who + ": store " + what + " of key '" + key + "' at " + endpoint(world) + " failed within the " +
                   std::to_string(timeout.count()) + " ms timeout: " + current_exception_message(),
               "rank 0 hosts the store: check that it is still running and that some rank sets the key");
}

DistributedError store_barrier_failed(int rank, const std::string& who, const std::string& name,
                                      std::chrono::milliseconds timeout) {
  return DistributedError(rank, "barrier",
                          fmt::format("{}: not every rank reached '{}' within {} s: {}", who, name,
                                      timeout.count() / 1000.0, current_exception_message()),
                          "A rank is far behind or stuck (its own error names why); if rank 0's saves are "
                          "legitimately slower, raise [distributed] save_timeout_s.");
}

DistributedError store_connection_failed(int rank, const std::string& who, const WorldInfo& world) {
  return DistributedError(rank, "rendezvous",
                          who + ": could not open a second connection to the store at " + endpoint(world) + ": " +
                              current_exception_message());
}

DistributedError group_creation_failed(int rank, const std::string& who, const std::string& backend,
                                       const char* what) {
  return DistributedError(rank, "rendezvous",
                          who + ": could not create the " + backend + " " + what + ": " + current_exception_message(),
                          "every member of a group must create it, in the same order on every rank");
}

}  // namespace strata::detail
