#pragma once
// C10dComm: the ProcessGroupComm over one c10d backend, the job's communicator or one of its
// subgroups and separate streams. Its members are defined by concern:
//   comm/process_group.cpp  the collectives (launch, staging, booking)
//   comm/store.cpp          store_set/store_get, store barriers, the heartbeat's connection
//   comm/subgroups.cpp      subgroups and separate streams
//   comm/rendezvous.cpp     the first barrier (make_process_group_comm is there too)
// Includes c10d headers: see the list at the top of comm/process_group.cpp.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/accounting.hpp"
#include "comm/c10d_work.hpp"
#include "comm/process_group.hpp"

namespace strata::detail {

class C10dComm final : public ProcessGroupComm {
 public:
  /// `pg_store` is the namespace subgroups rendezvous in; `who` names this rank in messages.
  C10dComm(ProcessGroupOptions options, c10::intrusive_ptr<c10d::Store> kv_store,
           c10::intrusive_ptr<c10d::Store> pg_store, c10::intrusive_ptr<c10d::Backend> backend,
           std::vector<int> members, int global_rank, std::string who, std::shared_ptr<Accounting> accounting);
  ~C10dComm() override;

  int rank() const override { return options_.world.rank; }
  int world_size() const override { return options_.world.world_size; }
  torch::Device device() const override { return options_.device; }
  bool skips_collectives() const override { return world_size() == 1 && !options_.force_collectives; }

  // Collectives (comm/process_group.cpp).
  std::shared_ptr<CommWork> all_reduce(torch::Tensor& tensor, ReduceOp op, bool async) override;
  std::shared_ptr<CommWork> reduce_scatter(torch::Tensor& output, const torch::Tensor& input, ReduceOp op,
                                           bool async) override;
  std::shared_ptr<CommWork> all_gather(torch::Tensor& output, const torch::Tensor& input, bool async) override;
  std::shared_ptr<CommWork> broadcast(torch::Tensor& tensor, int root, bool async) override;
  std::shared_ptr<CommWork> all_to_all(torch::Tensor& output, const torch::Tensor& input, bool async) override;
  void barrier() override;

  // Subgroups and separate streams (comm/subgroups.cpp).
  std::shared_ptr<Comm> subgroup(const std::vector<int>& ranks) override;
  std::shared_ptr<Comm> separate_stream() override;

  // Counters (comm/accounting.hpp).
  void set_phase(CommPhase phase) override { accounting_->set_phase(phase); }
  CommCounters counters(CommPhase phase) const override { return accounting_->of(phase); }
  void book(std::int64_t payload_bytes, double bus_bytes, double seconds) override {
    accounting_->book(payload_bytes, bus_bytes, seconds);
  }
  std::function<JobProgress()> progress_source() const override {
    return [accounting = accounting_] { return accounting->progress(); };
  }

  // The job's store (comm/store.cpp).
  void store_set(const std::string& key, const std::string& value) override;
  std::string store_get(const std::string& key) override;
  std::shared_ptr<JobStore> connect_store(std::chrono::milliseconds timeout) override;
  void store_barrier(const std::string& name, std::chrono::milliseconds timeout) override;

  std::string group_name() const override { return backend_->getGroupUid(); }

  /// Synchronizes every rank once; used by the factory so a returned comm means "all ranks are up".
  /// Not booked: it is part of the rendezvous, not a strategy's traffic (comm/rendezvous.cpp).
  void connect_barrier();

 private:
  c10d::BarrierOptions barrier_options() const;

  /// Whether `output` is this rank's chunk of `input` itself (a reduce-scatter in place).
  bool in_place_chunk(const torch::Tensor& output, const torch::Tensor& input) const;

  /// Local argument check, before anything is sent (so a bad call cannot desynchronize ranks).
  void check_sizes(const char* op, const torch::Tensor& output, const torch::Tensor& input, bool sizes_ok,
                   const char* rule) const;

  /// Books the call, starts it, and either waits (sync) or hands back a pending work.
  std::shared_ptr<CommWork> launch(const char* op, std::int64_t payload, double bus_factor, bool async,
                                   const std::function<c10::intrusive_ptr<c10d::Work>()>& start, Finish finish);

  /// A new communicator over `ranks` (job ranks, validated by the caller).
  std::shared_ptr<Comm> make_group(const std::vector<int>& ranks, const char* what);

  ProcessGroupOptions options_;  // world: this group's rank and size
  c10::intrusive_ptr<c10d::Store> kv_store_;
  c10::intrusive_ptr<c10d::Store> pg_store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::vector<int> members_;  // job ranks of this communicator, ascending
  int global_rank_;
  std::string who_;
  std::shared_ptr<Accounting> accounting_;
  std::mutex launch_mutex_;
};

}  // namespace strata::detail
