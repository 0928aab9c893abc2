#pragma once
// The error text of the c10d communicator: what a rank says when the rendezvous, a collective, the
// job's store or a new group fails (the peers, the network, a timeout; never a bad argument, which
// the call that checks it reports). Each message names this rank, what failed and the timeout, and
// each fix says what to look at. The builders that read the exception in flight are to be called
// inside a catch.

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>

#include "comm/process_group.hpp"
#include "job/world.hpp"
#include "strata/errors.hpp"

namespace strata::detail {

/// c10d's message without LibTorch's C++ stack text ("Exception raised from ..." and frames).
std::string clean_message(const std::exception& e);
/// clean_message of the exception in flight ("unknown error" when it is no std::exception).
std::string current_exception_message();

/// "MASTER_ADDR:MASTER_PORT".
std::string endpoint(const WorldInfo& w);
/// "rank r of n".
std::string rank_name(const WorldInfo& w);

/// Rendezvous failure: names this rank, MASTER_ADDR:PORT and the timeout; `listening` is where
/// this rank's Gloo listens, when known. Call inside a catch.
[[noreturn]] void throw_rendezvous_error(const ProcessGroupOptions& o, const std::string& stage,
                                         const std::string& listening = {});

/// A collective that failed or timed out while `who` waited for it. Call inside a catch.
DistributedError collective_failed(int rank, const std::string& who, const std::string& op, std::int64_t bytes,
                                   std::chrono::milliseconds timeout);
/// A collective that c10d would not start. Call inside a catch.
DistributedError collective_not_started(int rank, const std::string& who, const std::string& op,
                                        std::int64_t bytes);

/// A store_set/store_get ("set", "get") of `key` that failed. Call inside a catch.
Error store_error(const std::string& who, const char* what, const std::string& key, const WorldInfo& world,
                  std::chrono::milliseconds timeout);
/// A store barrier `name` that not every rank reached within `timeout`. Call inside a catch.
DistributedError store_barrier_failed(int rank, const std::string& who, const std::string& name,
                                      std::chrono::milliseconds timeout);
/// The heartbeat's own connection to the store could not be opened. Call inside a catch.
DistributedError store_connection_failed(int rank, const std::string& who, const WorldInfo& world);

/// A subgroup or separate stream (`what`) whose `backend` communicator could not be created. Call
/// inside a catch.
DistributedError group_creation_failed(int rank, const std::string& who, const std::string& backend,
                                       const char* what);

}  // namespace strata::detail
