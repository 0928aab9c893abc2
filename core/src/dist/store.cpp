// The job's store (rank 0's TCPStore, or torchrun's agent's) as the communicator uses it:
// store_set/store_get in its "kv" namespace, the store barriers around rank 0's work (a deadline of
// their own, apart from the collective timeout), and the heartbeat's connection of its own
// (JobStore over a TCPStore client). Includes c10d headers: see dist/process_group.cpp.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dist/c10d_comm.hpp"
#include "dist/comm_errors.hpp"

namespace strata::detail {

namespace {

/// JobStore over a TCPStore client of its own (a TCPStore connection serves one thread at a time).
class C10dJobStore final : public JobStore {
 public:
  explicit C10dJobStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
  }
  std::optional<std::string> get_if_set(const std::string& key) override {
    if (!store_->check({key})) return std::nullopt;
    auto value = store_->get(key);
    return std::string(value.begin(), value.end());
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return store_->add(key, delta); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

/// A TCPStore client of its own to the job's store at world.master_addr:master_port, under
/// `prefix`, whose calls fail after `timeout` (the heartbeat's connection).
std::shared_ptr<JobStore> connect_job_store(const WorldInfo& world, const std::string& prefix,
                                            std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(world.master_port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = timeout;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(world.master_addr, o);
  return std::make_shared<C10dJobStore>(c10::make_intrusive<c10d::PrefixStore>(prefix, tcp));
}

}  // namespace

void C10dComm::store_set(const std::string& key, const std::string& value) {
  try {
    kv_store_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
  } catch (...) {
    throw store_error(who_, "set", key, options_.world, options_.timeout);
  }
}

std::string C10dComm::store_get(const std::string& key) {
  try {
    kv_store_->wait({key}, options_.timeout);
    auto value = kv_store_->get(key);
    return {value.begin(), value.end()};
  } catch (...) {
    throw store_error(who_, "get", key, options_.world, options_.timeout);
  }
}

void C10dComm::store_barrier(const std::string& name, std::chrono::milliseconds timeout) {
  const std::string key = "barrier/" + name;
  try {
    if (kv_store_->add(key + "/arrived", 1) == world_size()) kv_store_->set(key + "/done", std::vector<std::uint8_t>{'1'});
    kv_store_->wait({key + "/done"}, timeout);
  } catch (...) {
    throw store_barrier_failed(global_rank_, who_, name, timeout);
  }
}

std::shared_ptr<JobStore> C10dComm::connect_store(std::chrono::milliseconds timeout) {
  try {
    return connect_job_store(options_.world, options_.store_prefix + "/monitor", timeout);
  } catch (...) {
    throw store_connection_failed(global_rank_, who_, options_.world);
  }
}

}  // namespace strata::detail
