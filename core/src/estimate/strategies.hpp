#pragma once
// A strategy's step and its memory per rank at a world size, from a profile of one run on one
// device: the strategy's own schedule (strata/schedule.hpp, Registry::set_schedule; the kit
// declares every plan's), fed with the profile's units and times, simulated on a network. Nothing
// here knows a strategy by name: a strategy that declares no schedule is predicted as a replica
// that does not communicate, and the estimate says so.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "estimate/network.hpp"
#include "estimate/simulate.hpp"
#include "strata/registry.hpp"

namespace strata::estimate {

/// One model unit: its parameter count, and its compute time where it was measured.
struct UnitProfile {
  std::string name;
  double params = 0;           ///< elements
  double forward_s = -1;       ///< per step on one device; < 0: split from the step's compute
  double backward_s = -1;
  // Measured by the per-unit profile (model_units with timing), per micro-batch; < 0: not measured.
  double activation_bytes = -1;         ///< held from the unit's forward to its backward (its output included)
  double checkpointed_bytes = -1;       ///< the same with the unit checkpointed (its input saved, the rest recomputed)
  double checkpointed_backward_s = -1;  ///< backward with the forward recomputed first
  std::vector<std::vector<std::int64_t>> tensors{};  ///< shapes of its trainable tensors (empty: unknown)
  std::vector<std::size_t> reads_from{};  ///< earlier units whose parameters it reads too (tied weights)
};

/// The units' ties as the schedule takes them (ScheduleInput::tied): (reader, holder) pairs.
std::vector<std::pair<std::size_t, std::size_t>> tied_units(const std::vector<UnitProfile>& units);

/// What one run on one device says about the experiment.
struct Profile {
  std::string source;              ///< the run directory
  std::string device = "cpu";      ///< "cpu" or "cuda"
  std::string device_name;         ///< the GPU's name, or the host's
  double parameters = 0;           ///< elements
  std::vector<UnitProfile> units;  ///< forward order; empty: one unit of every parameter
  bool per_unit_times = false;     ///< the units' times were measured (else split by parameter share)
  double global_batch = 1;
  int micro_batches = 1;
  int threads = 0;                 ///< CPU: the intra-op threads the profile computed with (0: unknown)
  int host_threads = 0;            ///< CPU: the hardware threads of its host (0: unknown)
  int rank_threads = 0;            ///< CPU: [train] threads, what every rank computes with (0: the host's over its ranks)
  /// CPU: compute + optimizer + data of the same step measured with fewer threads (threads -> seconds);
  /// a count not here is taken to scale linearly from `threads`.
  std::map<int, double> compute_by_threads;
  // Per optimizer step on one device, seconds:
  double step_s = 0;               ///< steady step time
  /// How much its steady steps varied: (p75 - p25) / median (summary.json
  /// steady_step_time_quartiles_s; 0: not recorded), and on the CPU the spread of the reference
  /// runs the thread counts were measured against (0: none).
  double step_spread = 0;
  double reference_spread = 0;
  double compute_s = 0;            ///< forward + backward of every micro-batch
  double optimizer_s = 0;
  double data_s = 0;
  double other_s = 0;              ///< the rest of the step (fixed overheads)
  /// The step's work on the device's threads: compute, optimizer and data.
  double work_s() const { return compute_s + optimizer_s + data_s; }
  // Bytes:
  double state_bytes = 0;          ///< params + grads + optimizer state held between steps
  double peak_tensor_bytes = 0;    ///< the most live tensor bytes during steps
  double activation_bytes_per_sample = 0;  ///< (peak - state) per example of a micro-batch
  std::vector<std::int64_t> sample_shape;  ///< one example's input shape the profile ran at; empty: not recorded
  std::string optimizer = "adamw"; ///< "adamw" or "sgd"
  double momentum = 0.9;
  std::string param_dtype = "float32";
  std::string reduce_dtype = "float32";
  std::vector<std::string> notes;  ///< how coarse the profile is, said in the output
};

struct MemoryEstimate {
  double params = 0;       ///< bytes per rank held between steps (masters included)
  double grads = 0;
  double optimizer = 0;
  double extra = 0;        ///< state the strategy keeps besides (ScheduleMemory::extra), bytes per rank
  /// State in host memory, apart from the device's (ScheduleMemory::extra named host_*: optimizer
  /// offload) on a GPU; CPU ranks hold it in the same memory, there it counts in `extra`.
  double host = 0;
  double activations = 0;  ///< held between forward and backward, per micro-batch on this rank
  double gathered = 0;     ///< sharded parameters: units gathered at once (the one running, prefetched ones, its gradients)
  double buffers = 0;      ///< communication buffers: staged gradients, buckets
  double transient_step = 0;  ///< the optimizer step's temporaries (when they outweigh activations)
  /// Reductions that run once backward has freed the activations (sharded optimizer state: after
  /// the last micro-batch; sharded gradients: the last groups): their inputs and the backend's
  /// copies of them.
  double after_backward = 0;
  double state() const { return params + grads + optimizer + extra; }
  /// The peak: the state plus the largest of backward's (activations, gathered, buffers), the
  /// reductions after it, and the step's temporaries.
  double peak() const;
};

struct StrategyEstimate {
  std::string strategy;
  int world_size = 1;
  bool applicable = true;  ///< false: the strategy does not run at this world size (a one-device strategy above 1)
  bool coarse = false;     ///< the strategy declares no schedule: a replica that does not communicate
  std::string note;
  double step_s = 0;
  /// The interval the step time is predicted in (interval_of: the profile's noise and the model's
  /// own error, stated).
  double step_low_s = 0, step_high_s = 0;
  double compute_s = 0;      ///< busy time of the compute stream
  double exposed_comm_s = 0;
  double comm_s = 0;         ///< busy time of every communication stream
  double bus_bytes = 0;      ///< per step, docs/user-guide.md
  double payload_bytes = 0;
  int collectives = 0;
  MemoryEstimate memory;
  /// > 0: what the whole process holds, where one process holds several devices' replicas on the
  /// host (replicas of one process on the CPU), as such a run measures it.
  double process_peak = 0;
  Schedule schedule;
};

/// The estimator's own error on step time, stated: the median absolute error its published studies
/// measured against `strata compare` (BENCHMARKS.md: 7.5% to 11.4% on a 2-core host), rounded up.
inline constexpr double kModelError = 0.10;
/// The relative half-width of a predicted step time's interval: the model's error and the noise
/// of what it was predicted from (the profile's steady steps, the CPU's reference runs), combined
/// as independent errors.
double prediction_uncertainty(const Profile& profile);

/// Context of one estimate.
struct EstimateInput {
  const Profile* profile = nullptr;
  const Network* network = nullptr;
  int world_size = 1;
  /// The global batch at this world size over the profile's: 1 in strong scaling, N / the baseline's
  /// N in weak scaling (the batch per rank fixed).
  double batch_scale = 1;
};

/// What the estimator knows of a strategy: its schedule for the options it is estimated with, and
/// its placement.
struct StrategyModel {
  std::function<Schedule(const ScheduleInput&)> schedule;  ///< empty: none declared
  bool one_device = false;  ///< Placement::one_device (single): world size 1 only
};

/// The schedule strategy `entry` declares for `options` at `input` (entry.scheduler must be set).
/// strata::Error (OptionError included) passes through; any other exception of the plugin's code
/// becomes a PluginError naming the strategy and its library.
Schedule strategy_schedule(const RegistryEntry& entry, const Options& options, const ScheduleInput& input);

/// Strategy `name` of `registry` with `options` (its [strategy] options; the defaults where one is
/// not given); an unknown name gives an empty model (estimated as a full replica).
StrategyModel strategy_model(const Registry& registry, const std::string& name, const Options& options);
/// `world` ranks on `network`'s hosts (all on one host when it does not say GPUs per node).
Topology topology_on(const Network& network, int world);

/// How much longer a rank's computation takes at `world` than the profile's on one device, for the
/// same work: 1 on GPUs (a device per rank). On the CPU the ranks of a host share its hardware
/// threads: a rank computes with max(1, T / L) threads (T the host's threads, L its ranks there, as
/// `strata run` sets them; Profile::rank_threads when [train] threads fixes them) where the
/// profile had `threads`, and L x that above T time-shares the
/// cores in ceil(L x threads / T) rounds (a rank's threads are scheduled whole). The step's work at a rank's thread count is Profile::compute_by_threads's where measured,
/// else taken to scale linearly (a host's throughput then is what the profile measured).
double host_compute_factor(const Profile& profile, const Network& network, int world);
/// The threads a rank computes with at `world` on the CPU (see host_compute_factor).
int rank_threads(const Profile& profile, const Network& network, int world);
/// CPU ranks (more than one) whose threads fill their host's hardware threads (L x threads >= T):
/// collectives then run on the cores the ranks compute on (Gloo's threads, the loopback transfers,
/// the reductions), so they take their time from the step rather than overlap it. False on GPUs.
bool collectives_share_cores(const Profile& profile, const Network& network, int world);

/// The schedule's input for `in`: the profile's units and their times per micro-batch on one rank
/// at in.world_size (the batch and the host's cores shared), the profile's dtypes and optimizer.
ScheduleInput schedule_input(const EstimateInput& in);
/// Estimates `strategy` at `in.world_size`: its schedule simulated, else a replica (coarse).
StrategyEstimate estimate_strategy(const std::string& strategy, const EstimateInput& in, const StrategyModel& model);

/// Bytes per parameter of optimizer state (AdamW 8, SGD with momentum 4, plain SGD 0).
double optimizer_bytes_per_param(const Profile& p);

}  // namespace strata::estimate
