#pragma once
/// \file schedule.hpp
/// One training step of a strategy as data: the one description of a strategy that the host
/// reads. A strategy declares it (Registry::set_schedule; the kit's strata::add_plan does it for
/// every plan from the very Plan its engine runs), and
///
///   - `strata check` holds each run to it: the bus bytes its collectives put on the wire, and the
///     model state it says a rank holds, category by category;
///   - `strata estimate` and the fit check of `strata validate` / `strata run` simulate it on a
///     network's collectives and a profile's compute times.
///
/// The vocabulary is deliberately small and fixed (ops on streams with dependencies, collectives
/// over groups of ranks, bytes held), so that a new mechanism of a strategy (a quantized gather,
/// a two-level reduction, an outer optimizer) is a new schedule, not a new field of the plugin ABI.
///
/// A Schedule is a list of ops in issue order. Every op runs on a named stream ("compute",
/// "comm", "gather", ...): a stream runs its ops one at a time, in the order they were added, as a
/// CUDA stream does; an op also waits for every op it depends on. A bounded number of buffers in
/// flight is a dependency too (window()).

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace strata {

/// The ranks a strategy's schedule is made for: the world size and the ranks of one host.
struct Topology {
  int world_size = 1;
  int local_world_size = 1;
};

/// The collectives a schedule counts, with nccl-tests' size and bus-factor conventions:
/// all_gather's size is its output, reduce_scatter's its input, all_reduce's and
/// broadcast's the buffer, all_to_all's what each rank sends (Comm::all_to_all, ABI 11.1).
enum class Collective { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll };

inline const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllToAll: return "all_to_all";
  }
  return "?";
}

/// nccl-tests' bus factor of `c` over `n` ranks: all_reduce 2(n-1)/n, reduce_scatter,
/// all_gather and all_to_all (n-1)/n, broadcast 1; 0 for one rank.
inline double bus_factor(Collective c, int n) {
  if (n <= 1) return 0.0;
  const double f = static_cast<double>(n - 1) / n;
  switch (c) {
    case Collective::kAllReduce: return 2 * f;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll: return f;
    case Collective::kBroadcast: return 1.0;
  }
  return 0.0;
}

/// What a schedule is made for: the model's units, the job and the step's work on one rank. The
/// host fills it from the model (strata check) or from a profile (strata estimate).
struct ScheduleInput {
  /// One model unit (a sharding strategy gathers one at a time), in forward order.
  struct Unit {
    std::string name;
    double params = 0;  ///< trainable elements
    /// The shapes of its trainable tensors, where known (empty: unknown; strategies whose traffic
    /// depends on shapes, such as low-rank compression, then say so in the schedule's note).
    std::vector<std::vector<std::int64_t>> tensors;
    double forward_s = 0;   ///< one micro-batch's forward on this rank (0: not timed)
    double backward_s = 0;  ///< its backward
  };
  Topology topology;
  int micro_batches = 1;
  /// The optimizer step this schedule describes, from 0; kSteady: any step once start-up
  /// behaviours are over (what `strata estimate` predicts). `strata check` averages the schedules
  /// of the steps it ran, as a run's summary averages its measured traffic.
  std::int64_t step = kSteady;
  static constexpr std::int64_t kSteady = -1;
  /// The run's optimizer steps (0: unknown): the schedule of the last one includes what
  /// Strategy::finish_training() sends.
  std::int64_t steps = 0;
  std::vector<Unit> units;
  double param_bytes = 4;      ///< bytes per element of parameters in forward and backward ([precision] param_dtype)
  double reduce_bytes = 4;     ///< bytes per element of gradients on the wire ([precision] reduce_dtype)
  double optimizer_bytes = 8;  ///< bytes of optimizer state per element it steps (AdamW 8, SGD with momentum 4)
  double optimizer_s = 0;      ///< the optimizer step over every parameter, on one rank
  bool cpu = true;             ///< ranks on CPUs (Gloo's copies count), else on GPUs (NCCL)

  /// Tied weights (ABI 11.2; appended, so that a plugin built before it reads the fields above as
  /// they were): (reader, holder) pairs of units, `reader` reading parameters that the earlier unit
  /// `holder` holds (and counts: an embedding and the output head tied to it). A strategy that
  /// gathers units keeps `holder` gathered until `reader` has run.
  std::vector<std::pair<std::size_t, std::size_t>> tied;

  double parameters() const {
    double total = 0;
    for (const auto& u : units) total += u.params;
    return total;
  }
};

/// One op of a schedule.
struct ScheduleOp {
  enum class Kind { kCompute, kCollective };
  int id = 0;
  std::string name;          ///< "forward 3 (micro 0)", "all_gather 3 (backward, micro 0)", ...
  std::string stream;        ///< "compute", "comm", "gather", ...
  Kind kind = Kind::kCompute;
  double seconds = 0;        ///< compute ops: their duration
  Collective collective = Collective::kAllReduce;
  double bytes = 0;          ///< collectives: the size as nccl-tests counts it (see Collective)
  std::string dtype = "float32";  ///< collectives: the element type on the wire
  int group = 1;             ///< collectives: ranks taking part
  int per_node = 0;          ///< collectives: of those, ranks on one node (0: consecutive ranks, packed)
  std::vector<int> deps;     ///< ops (ids, all added before this one) that must end before it starts

  /// Bus bytes: the size times the bus factor; 0 for compute.
  double bus_bytes() const { return kind == Kind::kCollective ? bytes * bus_factor(collective, group) : 0.0; }
};

/// What a rank holds, in bytes. Between steps (what Strategy::memory() measures, and what
/// `strata check` holds a run to, category by category):
struct ScheduleMemory {
  double params = 0;     ///< parameters and their float32 masters
  double grads = 0;      ///< gradients
  double optimizer = 0;  ///< the optimizer's state
  /// State a strategy keeps besides (an outer optimizer's momentum, error-feedback buffers), by
  /// the names its Strategy::memory() reports them under (ModelStateBytes::extra).
  std::vector<std::pair<std::string, double>> extra;
  // During the step, on top of that state (what the fit check and `strata estimate` add to the
  // host's activations to predict the peak):
  double gathered = 0;        ///< parameters gathered at once, with the gradients of the unit running
  double buffers = 0;         ///< communication buffers held during backward (staged gradients)
  double after_backward = 0;  ///< reductions that run once backward freed the activations
  double transient_step = 0;  ///< the optimizer step's temporaries
  /// > 0: what the whole process holds beyond this rank's peak (one process driving several
  /// devices' replicas on the host).
  double process_extra = 0;

  double extra_total() const {
    double total = 0;
    for (const auto& [name, bytes] : extra) total += bytes;
    return total;
  }
  double state() const { return params + grads + optimizer + extra_total(); }
};

class Schedule {
 public:
  /// Adds a compute op of `seconds` on `stream`; returns its id.
  int compute(std::string name, double seconds, std::vector<int> deps = {}, std::string stream = "compute") {
    ScheduleOp op;
    op.name = std::move(name);
    op.stream = std::move(stream);
    op.seconds = std::max(0.0, seconds);
    op.deps = std::move(deps);
    return add(std::move(op));
  }
  /// Adds a collective of `bytes` (in `dtype` on the wire) over `group` ranks on `stream`; returns its id.
  int collective(std::string name, Collective c, double bytes, int group, std::vector<int> deps = {},
                 std::string stream = "comm", std::string dtype = "float32") {
    ScheduleOp op;
    op.name = std::move(name);
    op.stream = std::move(stream);
    op.kind = ScheduleOp::Kind::kCollective;
    op.collective = c;
    op.bytes = bytes;
    op.group = group;
    op.dtype = std::move(dtype);
    op.deps = std::move(deps);
    return add(std::move(op));
  }
  /// Makes collective `id` a group of ranks spread over nodes, `per_node` on each (1: one per node).
  void spread(int id, int per_node) { at(id).per_node = per_node; }
  /// Makes op `id` depend on `dep` too (dep must have been added before it).
  void depend(int id, int dep) {
    check_deps({dep}, id);
    at(id).deps.push_back(dep);
  }
  /// A bounded number in flight: takers[i] (the op that takes a buffer) depends on frees[i - k]
  /// (the op after which a buffer is free again), for k buffers.
  void window(const std::vector<int>& takers, const std::vector<int>& frees, int k) {
    if (k < 1) k = 1;
    for (std::size_t i = static_cast<std::size_t>(k); i < takers.size(); ++i)
      if (i - static_cast<std::size_t>(k) < frees.size()) depend(takers[i], frees[i - static_cast<std::size_t>(k)]);
  }

  const std::vector<ScheduleOp>& ops() const noexcept { return ops_; }
  const ScheduleOp& op(int id) const { return ops_.at(static_cast<std::size_t>(id)); }
  /// The sum of every collective's bus bytes.
  double bus_bytes() const {
    double total = 0;
    for (const auto& op : ops_) total += op.bus_bytes();
    return total;
  }

  /// What a rank holds.
  ScheduleMemory memory;
  /// The share of the global batch this rank loads (its data time); < 0: 1 / world size.
  double data_share = -1;
  /// False: the strategy does not run at this topology with these options; `note` says why and
  /// `option` names the strategy option responsible ("" when it is the world size itself).
  bool applicable = true;
  std::string option;
  /// How the schedule was made, where it is coarser than what runs (shown by `strata estimate`).
  std::string note;

 private:
  ScheduleOp& at(int id) {
    if (id < 0 || id >= static_cast<int>(ops_.size())) throw std::out_of_range("schedule: no op " + std::to_string(id));
    return ops_[static_cast<std::size_t>(id)];
  }
  void check_deps(const std::vector<int>& deps, int next) const {
    for (int d : deps)
      if (d < 0 || d >= next)
        throw std::invalid_argument("schedule: op " + std::to_string(next) + " depends on op " + std::to_string(d) +
                                    ", which was not added before it");
  }
  int add(ScheduleOp op) {
    op.id = static_cast<int>(ops_.size());
    check_deps(op.deps, op.id);
    ops_.push_back(std::move(op));
    return ops_.back().id;
  }
  std::vector<ScheduleOp> ops_;
};

}  // namespace strata
