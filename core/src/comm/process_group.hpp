#pragma once
// strata::Comm over c10d process groups: Gloo for CPU tensors, NCCL for CUDA tensors, with a
// TCPStore rendezvous. c10d's C++ API is internal to LibTorch; comm/ is the one place that uses it
// (the files listed at the top of comm/process_group.cpp).

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "comm/job_monitor.hpp"
#include "job/world.hpp"
#include "strata/comm.hpp"

namespace strata {

struct ProcessGroupOptions {
  WorldInfo world;
  std::string backend = "gloo";            ///< "gloo" or "nccl"
  torch::Device device{torch::kCPU};       ///< this rank's device (CUDA for nccl)
  std::chrono::milliseconds timeout{300000};  ///< rendezvous and collective timeout
  /// The job's keys in the store: "strata", or "strata/attempt_N" in the store of torchrun's
  /// agent, which outlives restarts (set by make_process_group_comm).
  std::string store_prefix = "strata";
  /// The job's secret (STRATA_JOB_SECRET, or the file named by STRATA_JOB_SECRET_FILE; set by
  /// make_process_group_comm): the store messages that make ranks act carry its seal, and ranks
  /// ignore any that do not. Empty: no seal (a job started without a secret). Never printed.
  std::string job_secret;
  /// What a seal is bound to besides the key: the prefix and the launcher's restart count.
  std::string seal_scope;
  /// Issue collectives even on one rank (Comm::skips_collectives() false): [distributed]
  /// force_collectives. Subgroups and separate streams inherit it.
  bool force_collectives = false;
  /// The communicator's name in c10d (its group uid: NCCL's watchdog logs and flight-recorder
  /// dumps, Gloo's logs) and the job ranks it holds (empty: every rank). The job's communicator is
  /// "world"; subgroups and separate streams are named where they are made ("subgroup1:0,1").
  std::string group_name = "world";
  std::vector<int> global_ranks;
};

/// A Comm whose collectives run on a c10d process group; also exposes the store for small
/// key/value exchanges (the run directory chosen by rank 0). Rendezvous failures and timeouts
/// throw strata::Error naming the rank, the master address and port, and the timeout.
class ProcessGroupComm : public Comm {
 public:
  /// Sets `key` to `value` in the job's store (visible to every rank).
  virtual void store_set(const std::string& key, const std::string& value) = 0;
  /// Waits (up to the timeout) for `key` and returns its value.
  virtual std::string store_get(const std::string& key) = 0;
  /// A connection of its own to the job's store (for the heartbeat thread), whose calls fail
  /// after `timeout`; its keys are apart from store_set/store_get's.
  virtual std::shared_ptr<JobStore> connect_store(std::chrono::milliseconds timeout) = 0;
  /// Returns once every rank of the job has reached the barrier `name` (each name once per job),
  /// or throws DistributedError after `timeout`. A barrier through the job's store, not a
  /// collective: it has a deadline of its own, so that rank-0-only work (a checkpoint's commit, a
  /// final save) may outlast the collective timeout without c10d's watchdog aborting the ranks
  /// that wait for it. A rank lost meanwhile is the heartbeat's to report.
  virtual void store_barrier(const std::string& name, std::chrono::milliseconds timeout) = 0;
  /// What this rank's communicators (this one, its subgroups and separate streams) have issued,
  /// for the job monitor's hang watch: the source keeps what it reads alive by itself.
  virtual std::function<JobProgress()> progress_source() const = 0;
  /// The name c10d knows this communicator by (ProcessGroupOptions::group_name).
  virtual std::string group_name() const = 0;
};

/// Connects to the job (rank 0 hosts the TCPStore), creates the process group, and runs a
/// barrier so that every rank is known to be up before training starts.
std::unique_ptr<ProcessGroupComm> make_process_group_comm(const ProcessGroupOptions& options);

/// Where c10d's flight recorder (its record of every communicator's last collectives, which NCCL's
/// watchdog dumps when a collective times out) writes this rank's dump: `<run_dir>/comm_trace/rank_<R>`,
/// beside the run's verdict, instead of c10d's default /tmp/nccl_trace_rank_<R>. A
/// TORCH_NCCL_DEBUG_INFO_TEMP_FILE in the environment wins (the user chose a place). Call once, after
/// the run directory is known and before a collective can time out (c10d makes its writer at the
/// first dump). Returns the file the dump goes to.
std::filesystem::path direct_flight_recorder(const std::filesystem::path& run_dir, int rank);

/// `<run_dir>/comm_trace/rank_<R>`: where this rank's flight record goes.
std::filesystem::path flight_record_file(const std::filesystem::path& run_dir, int rank);
/// Sets c10d's flight recorder to keep this rank's last 2,000 collectives (TORCH_FR_BUFFER_SIZE,
/// unless the environment chose): Gloo and NCCL record there what they issue and, NCCL after the
/// device ran it, what completed. Call before the first process group is made.
void keep_flight_record();
/// The collectives of this rank that c10d's flight recorder holds as not completed, oldest first
/// ("all_reduce of 2048 Float on strata world, issued 4.1 s ago, scheduled"): on NCCL, not yet
/// completed on the device, which runs behind the host. `backend` is "gloo" or "nccl"; empty when
/// the recorder holds none or is off.
std::vector<std::string> collectives_in_flight(const std::string& backend);
/// Writes c10d's flight-recorder dump of this rank (the pickle NCCL's watchdog writes on a timeout,
/// whose entries PyTorch's flight-recorder analyser reads for NCCL) to `file`, for a job the monitor ends (a hang,
/// a lost peer) before c10d's watchdog would. Never throws; returns whether a file was written.
bool dump_flight_recorder(const std::string& backend, const std::filesystem::path& file) noexcept;

}  // namespace strata
