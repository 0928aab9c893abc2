#pragma once
/// \file comm.hpp
/// Collective communication handed to strategies by the core. Every call is counted (payload
/// bytes, bus bytes, calls, time) so a strategy cannot forget to account for its traffic.
///
/// Bus bytes follow nccl-tests: for a tensor of S bytes on each of n ranks, all-reduce moves
/// 2(n-1)/n*S, reduce-scatter and all-gather (n-1)/n*S (S = the full tensor), broadcast S,
/// all-to-all (n-1)/n*S (S = what each rank sends).
///
/// Device invariant: a communicator works on one device, device(): CUDA for NCCL (and for Gloo
/// when the job's tensors are on a GPU), the CPU for Gloo on the CPU. Every tensor handed to a
/// call must live there; a tensor elsewhere is refused with a DistributedError naming the op, the
/// tensor's device and the communicator's, before anything is sent (so ranks never desynchronize
/// on a bad argument).
///
/// Ordering on CUDA: a call is issued on the communicator's own stream, after the work queued on
/// the caller's current stream (its inputs are ready); CommWork::wait() makes the caller's current
/// stream wait for the collective without blocking the host. Only CommWork::host_wait() blocks the
/// host, for the few values needed there. On the CPU every wait blocks until the collective is done.

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/types.h>

namespace strata {

/// Reduction applied by all_reduce and reduce_scatter.
enum class ReduceOp { kSum, kAvg, kMax };

/// Which part of the run traffic is booked to; per-step figures count kTrain only.
enum class CommPhase { kSetup, kTrain, kEval };

/// Counters of one phase.
struct CommCounters {
  std::int64_t calls = 0;          ///< number of collective calls
  std::int64_t payload_bytes = 0;  ///< bytes of the tensors passed in (per rank)
  double bus_bytes = 0;            ///< nccl-tests bus bytes (per rank)
  double time_s = 0;               ///< host time spent issuing calls and in waits, in seconds
};

/// A pending asynchronous collective. Both waits are idempotent; a failed collective (a lost peer,
/// a Gloo timeout) throws DistributedError from the first wait, naming the rank and the op.
class CommWork {
 public:
  virtual ~CommWork() = default;
  /// Orders the caller's current stream after the collective: work queued on that stream after
  /// this call sees the result. On CUDA this never blocks the host (collective timeouts are
  /// enforced by the backend's watchdog, which ends the process naming the rank and the op); on
  /// the CPU it blocks until the collective has completed, within the job's timeout.
  virtual void wait() = 0;
  /// Blocks the host until the collective has completed and its result can be read there, within
  /// the job's collective timeout (a timeout throws DistributedError). Also orders the current
  /// stream as wait() does.
  virtual void host_wait() = 0;
};

/// Collectives over the ranks of one job. Tensors are modified in place where noted; every tensor
/// must be defined and live on device().
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// The device of every tensor handed to this communicator.
  virtual torch::Device device() const = 0;

  /// In place: every rank ends with the reduction of all ranks' `tensor`.
  virtual std::shared_ptr<CommWork> all_reduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::kSum,
                                               bool async = false) = 0;
  /// `output` (numel = input.numel() / world_size) receives this rank's slice of the reduction.
  /// `output` may be that slice of `input` itself (in place: no staging copy on any backend);
  /// the rest of `input` is undefined afterwards.
  virtual std::shared_ptr<CommWork> reduce_scatter(torch::Tensor& output, const torch::Tensor& input,
                                                   ReduceOp op = ReduceOp::kSum, bool async = false) = 0;
  /// `output` (numel = input.numel() * world_size) receives every rank's `input`, in rank order.
  /// `input` may be this rank's slice of `output` itself (in place: NCCL gathers in place, Gloo
  /// through a buffer of its own).
  virtual std::shared_ptr<CommWork> all_gather(torch::Tensor& output, const torch::Tensor& input,
                                               bool async = false) = 0;
  /// In place: every rank ends with `root`'s tensor.
  virtual std::shared_ptr<CommWork> broadcast(torch::Tensor& tensor, int root = 0, bool async = false) = 0;
  /// Returns when every rank has reached it.
  virtual void barrier() = 0;

  /// A communicator over `ranks` (ascending job ranks, this rank among them), for hierarchical
  /// strategies (HYBRID_SHARD: shard inside a group, replicate across groups). Every member calls
  /// it, and every rank creates its groups in the same order. Its calls are booked to this
  /// communicator's counters (with the group's own bus factors) and phase.
  virtual std::shared_ptr<Comm> subgroup(const std::vector<int>& ranks) = 0;
  /// A communicator over the same ranks whose collectives run on a stream of their own, so that,
  /// say, all-gathers do not queue behind reduce-scatters: on CUDA a second communicator (NCCL
  /// runs each communicator's collectives on its own stream); on the CPU, where Gloo runs
  /// collectives on its own threads anyway, this communicator itself. A collective call: every
  /// member calls it, in the same order. Booked like this one; this one must outlive it.
  virtual std::shared_ptr<Comm> separate_stream() = 0;

  /// Phase that subsequent calls are booked to.
  virtual void set_phase(CommPhase phase) = 0;
  /// Counters accumulated so far in `phase`.
  virtual CommCounters counters(CommPhase phase) const = 0;
  /// Books one transfer that a strategy made itself rather than through a collective (dp's
  /// copies between the devices of one process) to the current phase, so that its traffic is
  /// counted like any other.
  virtual void book(std::int64_t payload_bytes, double bus_bytes, double seconds) = 0;

  /// Whether a caller may skip a collective of this communicator and compute its result locally
  /// (a copy, or nothing): true for one rank, unless the job forces collectives. `[distributed]
  /// force_collectives = true` is a debug mode in which a one-rank job issues every all-gather,
  /// reduce-scatter and all-reduce a larger job would, on the same communicators and streams, so
  /// that one GPU runs the whole NCCL path of a strategy (streams, events, prefetch, buffer
  /// lifetimes). Strategies decide "skip or issue" through this, never through world_size().
  virtual bool skips_collectives() const { return world_size() == 1; }

  /// All-to-all: `input` is world_size() equal chunks, chunk r for rank r; `output` (the same
  /// numel and dtype) receives, in rank order, the chunk every rank sent to this one. Any dtype
  /// (quantized payloads travel as int8). nccl-tests' bus bytes: (n-1)/n x the input's bytes.
  /// Added in ABI 11.1 (after every other virtual, so plugins built before it keep working); a
  /// communicator that does not provide it throws DistributedError naming itself.
  virtual std::shared_ptr<CommWork> all_to_all(torch::Tensor& output, const torch::Tensor& input, bool async = false);
};

/// Bus-bytes factor of nccl-tests for an operation over `world_size` ranks.
double all_reduce_bus_factor(int world_size);
double gather_scatter_bus_factor(int world_size);

/// Throws DistributedError (rank and op named) unless `tensor` is defined and lives on
/// `comm.device()`. Every Comm implementation calls it for each tensor of each call.
void check_comm_device(const Comm& comm, const char* op, const torch::Tensor& tensor);

/// The communicator of a one-process job on `device`: every collective is the identity on one
/// rank (which is exactly its mathematical meaning) and moves zero bus bytes.
std::unique_ptr<Comm> make_local_comm(torch::Device device = torch::kCPU);

}  // namespace strata
