// The job's store (rank 0's TCPStore, or torchrun's agent's) as the communicator uses it:
// store_set/store_get in its "kv" namespace, the store barriers around rank 0's work (a deadline of
// their own, apart from the collective timeout), and the heartbeat's connection of its own
// (JobStore over a TCPStore client). Includes c10d headers: see comm/process_group.cpp.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "comm/c10d_comm.hpp"
#include "comm/comm_errors.hpp"
#include "comm/job_guard.hpp"

namespace strata::detail {

namespace {

using Clock = std::chrono::steady_clock;

/// The seal of the job's namespace `space` ("kv", "monitor").
JobSeal seal_of(const ProcessGroupOptions& o, const std::string& space) {
  return JobSeal(o.job_secret, o.seal_scope + "/" + space);
}

std::string as_string(const std::vector<std::uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }
std::vector<std::uint8_t> as_bytes(const std::string& text) { return {text.begin(), text.end()}; }

/// A value of `key` that failed to open was written by a process outside the job.
Error forged_value(const std::string& who, const std::string& key, const WorldInfo& world) {
  return Error(who + ": the job's store at " + endpoint(world) + " holds a value of '" + key +
                   "' that no rank of this job wrote (it lacks the seal of the job's secret): a process outside the "
                   "job reached the store and wrote it",
               "find who connects to MASTER_PORT and keep that port off networks strangers share; the job ignores "
               "such values, and failed only because the true one never came");
}

/// Waits for a value of `key` sealed by the job, until `deadline` (c10d's wait throws there when
/// the key is unset): a stranger's value (one that does not open) is skipped, and the job's own
/// overwrites it. std::nullopt when a stranger's value still stands at the deadline.
std::optional<std::string> wait_sealed(c10d::Store& store, const JobSeal& seal, const std::string& key,
                                       Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    store.wait({key}, std::max(left, std::chrono::milliseconds(1)));
    if (auto value = seal.open(key, as_string(store.get(key)))) return value;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

/// JobStore over a TCPStore client of its own (a TCPStore connection serves one thread at a time).
class C10dJobStore final : public JobStore {
 public:
  C10dJobStore(c10::intrusive_ptr<c10d::Store> store, JobSeal seal) : store_(std::move(store)), seal_(std::move(seal)) {}
  void set(const std::string& key, const std::string& value) override { store_->set(key, as_bytes(seal_.seal(key, value))); }
  std::optional<std::string> get_if_set(const std::string& key) override {
    if (!store_->check({key})) return std::nullopt;
    return seal_.open(key, as_string(store_->get(key)));
  }
  std::string stored(const std::string& key) override {
    if (!store_->check({key})) return {};
    return as_string(store_->get(key));
  }
  bool all_set(const std::vector<std::string>& keys) override { return store_->check(keys); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  JobSeal seal_;
};

/// A TCPStore client of its own to the job's store (at store_host), under `prefix`, whose calls
/// fail after `timeout` (the heartbeat's connection).
std::shared_ptr<JobStore> connect_job_store(const ProcessGroupOptions& options, const std::string& prefix,
                                            std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(options.world.master_port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = timeout;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(store_host(options.world), o);
  return std::make_shared<C10dJobStore>(c10::make_intrusive<c10d::PrefixStore>(prefix, tcp),
                                        seal_of(options, "monitor"));
}

}  // namespace

void C10dComm::store_set(const std::string& key, const std::string& value) {
  try {
    kv_store_->set(key, as_bytes(seal_of(options_, "kv").seal(key, value)));
  } catch (...) {
    throw store_error(who_, "set", key, options_.world, options_.timeout);
  }
}

std::string C10dComm::store_get(const std::string& key) {
  std::optional<std::string> value;
  try {
    value = wait_sealed(*kv_store_, seal_of(options_, "kv"), key, Clock::now() + options_.timeout);
  } catch (...) {
    throw store_error(who_, "get", key, options_.world, options_.timeout);
  }
  if (!value) throw forged_value(who_, key, options_.world);
  return *value;
}

// Each rank sets its own arrival (a counter that every rank adds to would let a stranger who
// writes a non-number there break each rank's connection); rank 0 waits for all of them and
// sets "done", sealed, which the others wait for.
void C10dComm::store_barrier(const std::string& name, std::chrono::milliseconds timeout) {
  const std::string key = "barrier/" + name;
  const JobSeal seal = seal_of(options_, "kv");
  const auto deadline = Clock::now() + timeout;
  std::optional<std::string> done;
  try {
    const std::string mine = key + "/" + std::to_string(options_.world.rank);
    kv_store_->set(mine, as_bytes(seal.seal(mine, "1")));
    bool arrived = true;
    if (options_.world.rank == 0) {
      std::vector<std::string> keys;
      for (int r = 1; r < world_size(); ++r) keys.push_back(key + "/" + std::to_string(r));
      if (!keys.empty()) kv_store_->wait(keys, timeout);
      const auto values = keys.empty() ? std::vector<std::vector<std::uint8_t>>{} : kv_store_->multiGet(keys);
      for (std::size_t i = 0; i < keys.size() && arrived; ++i)
        arrived = seal.open(keys[i], as_string(values[i])) || wait_sealed(*kv_store_, seal, keys[i], deadline);
      if (arrived) kv_store_->set(key + "/done", as_bytes(seal.seal(key + "/done", "1")));
    }
    if (arrived) done = wait_sealed(*kv_store_, seal, key + "/done", deadline);
  } catch (...) {
    throw store_barrier_failed(global_rank_, who_, name, timeout);
  }
  if (done) return;
  try {
    throw std::runtime_error("the store held a value no rank of this job wrote (a process outside the job reached it)");
  } catch (...) {
    throw store_barrier_failed(global_rank_, who_, name, timeout);
  }
}

std::shared_ptr<JobStore> C10dComm::connect_store(std::chrono::milliseconds timeout) {
  try {
    return connect_job_store(options_, options_.store_prefix + "/monitor", timeout);
  } catch (...) {
    throw store_connection_failed(global_rank_, who_, options_.world);
  }
}

}  // namespace strata::detail
