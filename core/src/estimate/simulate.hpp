#pragma once
// One training step as data, and its simulation.
//
// A Schedule is a list of ops in issue order. Every op runs on a named stream ("compute",
// "comm", "gather"): a stream runs its ops one at a time, in the order they were added, as a CUDA
// stream does; an op also waits for every op it depends on. So an op starts at the later of its
// stream becoming free and its dependencies ending. A bounded number of buffers in flight
// (prefetch depth, reductions in flight, gradient buckets) is a dependency too: the op that would
// take the (k+1)-th buffer depends on the op that frees the first (`window`).
//
// Collectives take their time from a Network (network.hpp); compute ops carry their own.

#include <map>
#include <string>
#include <vector>

#include "estimate/network.hpp"

namespace strata::estimate {

enum class OpKind { kCompute, kCollective };

struct Op {
  int id = 0;
  std::string name;          ///< "forward 3", "all_gather 3 (backward)", ...
  std::string stream;        ///< "compute", "comm", "gather", ...
  OpKind kind = OpKind::kCompute;
  double seconds = 0;        ///< compute ops: their duration
  Collective collective = Collective::kAllReduce;
  double bytes = 0;          ///< collectives: the tensor's size S as nccl-tests counts it (all_gather:
                             ///< the output, reduce_scatter: the input, all_reduce: the buffer)
  int group = 1;             ///< collectives: ranks taking part
  int per_node = 0;          ///< collectives: of those, ranks on one node (0: consecutive ranks, packed)
  std::vector<int> deps;     ///< ops (ids, all added before this one) that must end before it starts
};

class Schedule {
 public:
  /// Adds a compute op of `seconds` on `stream`; returns its id.
  int compute(std::string name, double seconds, std::vector<int> deps = {}, std::string stream = "compute");
  /// Adds a collective of `bytes` over `group` ranks on `stream`; returns its id.
  int collective(std::string name, Collective c, double bytes, int group, std::vector<int> deps = {},
                 std::string stream = "comm");
  /// Makes collective `id` a group of ranks spread over nodes, `per_node` on each (1: one per node).
  void spread(int id, int per_node);
  /// Makes op `id` depend on `dep` too (dep must have been added before it).
  void depend(int id, int dep);
  /// A bounded number in flight: takers[i] (the op that takes a buffer) depends on frees[i - k]
  /// (the op after which a buffer is free again), for k buffers.
  void window(const std::vector<int>& takers, const std::vector<int>& frees, int k);

  const std::vector<Op>& ops() const noexcept { return ops_; }
  const Op& op(int id) const { return ops_.at(static_cast<std::size_t>(id)); }

 private:
  /// Numbers `op`, checks that its dependencies come before it, and appends it.
  int add(Op op);
  std::vector<Op> ops_;
};

struct OpTiming {
  double start = 0;
  double end = 0;
};

struct Simulation {
  double step_s = 0;                      ///< when the last op ends
  double exposed_comm_s = 0;              ///< time the compute stream waits (idle before step_s)
  std::map<std::string, double> busy_s;   ///< per stream: the sum of its ops' durations
  double bus_bytes = 0;                   ///< sum over collectives of S x bus factor (DESIGN §8)
  double payload_bytes = 0;               ///< sum over collectives of S
  int collectives = 0;
  std::vector<OpTiming> timings;          ///< per op, by id
};

/// Simulates `schedule` with collective times from `network`. The compute stream is named
/// `compute_stream`; its idle time before the step ends is the exposed communication (a step
/// with no compute op exposes all of it).
Simulation simulate(const Schedule& schedule, const Network& network, const std::string& compute_stream = "compute");

}  // namespace strata::estimate
