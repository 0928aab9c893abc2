#pragma once
/// \file registry.hpp
/// Named factories of strategies, models and datasets. A plugin's register function adds one or
/// more entries, each with a one-line description and an options schema. Names are unique per
/// kind: a second registration of a name fails loudly, naming both libraries.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "strata/errors.hpp"
#include "strata/options.hpp"

namespace strata {

class Model;
class Dataset;
class Strategy;
struct ModelContext;
struct DatasetContext;

/// The three kinds of plugins.
enum class PluginKind { kStrategy, kModel, kDataset };
const char* kind_name(PluginKind kind) noexcept;

using ModelFactory = std::function<std::shared_ptr<Model>(const Options&, const ModelContext&)>;
using DatasetFactory = std::function<std::shared_ptr<Dataset>(const Options&, const DatasetContext&)>;
using StrategyFactory = std::function<std::shared_ptr<Strategy>(const Options&)>;
/// The number of parameters a model's options give, computed without building it (as a double:
/// options can ask for more than fits an integer).
using ModelEstimator = std::function<double(const Options&, const ModelContext&)>;
/// What a model's options say about its memory in training, computed without building it: the
/// host's fit check (`strata validate`, `strata run` before any rank trains) adds these to each
/// strategy's model state per rank.
struct ModelMemoryEstimate {
  /// Bytes of activations held between forward and backward for one example, with float32
  /// activations (the host scales them for a narrower [precision] param_dtype).
  double activation_bytes_per_sample = 0;
  /// Trainable parameters of each unit, in forward order (sharding strategies gather one unit at
  /// a time); empty: unknown (the whole model counts as one unit).
  std::vector<double> unit_parameters;
};
using ModelMemoryEstimator = std::function<ModelMemoryEstimate(const Options&, const ModelContext&)>;

/// How a strategy spreads over devices. The host rejects a world size the strategy cannot run
/// at, and `strata compare` maps its `world_size` axis through it.
struct Placement {
  enum class Kind {
    kRankPerDevice,     ///< one process (rank) per device: world size = ranks (ddp, fsdp, zero*)
    kOneDevice,         ///< one process on one device: world size 1 only (single)
    kDevicesInProcess,  ///< one process driving several devices (dp): world size = devices_option
  };
  Kind kind = Kind::kRankPerDevice;
  std::string devices_option;  ///< kDevicesInProcess: the integer option that holds the device count

  static Placement rank_per_device() { return {}; }
  static Placement one_device() { return {Kind::kOneDevice, {}}; }
  static Placement devices_in_process(std::string option) { return {Kind::kDevicesInProcess, std::move(option)}; }
};

/// How closely a strategy reproduces `single` (`strata check` holds it to this): exactly up to
/// floating-point reduction order (the default), or approximately by design (local SGD, gradient
/// compression), within a relative tolerance on the final parameter norm that it states.
struct Equivalence {
  bool exact = true;
  double rel_tolerance = 1e-5;  ///< on param_norm after the check's steps
  std::string reason;           ///< why it is approximate (shown in the check's table)

  static Equivalence approximate(double rel_tolerance, std::string reason) {
    return {false, rel_tolerance, std::move(reason)};
  }
};

/// What a strategy holds and moves by DESIGN §5 and §8, declared like its Equivalence, so that
/// `strata check` can hold the measured figures to the formula (an undeclared part is checked for
/// consistency only). With Psi parameters, N ranks and M micro-batches per step:
struct Footprint {
  /// Model state per rank: parameters 4 Psi, gradients 4 Psi, optimizer state (AdamW 8 Psi,
  /// SGD with momentum 4 Psi), each divided by N where sharded.
  struct Memory {
    bool params = false;
    bool grads = false;
    bool optimizer = false;
  };
  /// Bus bytes per optimizer step, in units of (N-1)/N x 4 Psi: per_step + per_micro_batch x M
  /// (ddp, zero1: 2 + 0; zero2: 1 + 1; zero3, fsdp FULL_SHARD: 0 + 3). Two-level strategies add
  /// what travels inside sub-groups of g ranks, in units of (g-1)/g x 4 Psi per micro-batch, g being
  /// the integer strategy option `subgroup_option` (0 there: the ranks of one host); e.g. ZeRO++
  /// hpZ: 2 per micro-batch over all ranks, and its backward all-gather, 1, inside the sub-group.
  struct Traffic {
    Traffic() = default;
    Traffic(double step, double micro_batch) : per_step(step), per_micro_batch(micro_batch) {}
    /// Adds `per_micro_batch` units of (g-1)/g x 4 Psi inside sub-groups of g ranks, g read from
    /// the strategy option `option`.
    Traffic& with_subgroup(double micro_batch, std::string option) {
      subgroup_per_micro_batch = micro_batch;
      subgroup_option = std::move(option);
      return *this;
    }
    double per_step = 0;
    double per_micro_batch = 0;
    double subgroup_per_micro_batch = 0;
    std::string subgroup_option;
  };
  std::optional<Memory> memory;
  std::optional<Traffic> traffic;
};

/// The ranks a strategy's plan is made for: the world size and the ranks of one host.
struct Topology {
  int world_size = 1;
  int local_world_size = 1;
};

/// A strategy of the kit (kit/include/strata/plan.hpp) as data the host reads: `strata estimate`
/// and validate's fit check simulate the schedule the kit's engine runs for it, instead of a
/// description of their own. The kit makes it from its Plan (strata::outline) and registers it
/// with Registry::set_plan; a strategy without one is estimated from its Footprint, coarser.
struct PlanOutline {
  enum class Sharded { kNothing, kOptimizer, kGradients, kParameters };  ///< the kit's Sharded
  enum class Reshard { kNone, kShardGroup, kSubgroup };                  ///< the kit's Reshard
  struct Unit {
    Reshard after_forward = Reshard::kShardGroup;
    int subgroup_size = 0;  ///< kSubgroup: ranks of the sub-group, 0: the ranks of one host
  };
  std::string owner;
  Sharded sharded = Sharded::kNothing;
  int shard_size = 0;                   ///< ranks per shard group: 0 every rank, 1 none, k hybrid
  bool reduce = true;                   ///< gradients averaged over the ranks
  std::int64_t group_bytes = 0;         ///< flat groups (buckets) of about this many bytes; kParameters: cuts a unit
  bool overlap = true;                  ///< reductions launched during backward
  std::int64_t reduce_coalesce_bytes = 0;
  int reductions_in_flight = 2;         ///< 0: every group
  std::int64_t allgather_bytes = 0;     ///< kOptimizer/kGradients: groups gathered together after the step
  bool wait_params_per_unit = false;    ///< kOptimizer/kGradients: those gathers waited for by each unit's next forward
  int forward_prefetch = 1;
  int backward_prefetch = 1;
  Unit units;                           ///< every unit's plan unless `unit` changes one
  bool keep_last_unit_gathered = true;
  /// Optional: the plan of unit `index` named `name`, starting from `units`.
  std::function<void(std::size_t index, const std::string& name, Unit& unit)> unit;
};
/// A strategy's plan for its options at a topology.
using StrategyPlanner = std::function<PlanOutline(const Options&, const Topology&)>;

/// What the host needs to know about a strategy besides its options.
struct StrategyTraits {
  StrategyTraits() = default;
  StrategyTraits(Placement p, Equivalence e = {}, Footprint f = {})  // NOLINT
      : placement(std::move(p)), equivalence(std::move(e)), footprint(std::move(f)) {}
  StrategyTraits(Equivalence e) : equivalence(std::move(e)) {}  // NOLINT
  StrategyTraits(Footprint f) : footprint(std::move(f)) {}      // NOLINT
  Placement placement;
  Equivalence equivalence;
  Footprint footprint;
};

/// One registered name.
struct RegistryEntry {
  /// Keeps the defining library loaded for as long as the entry (declared first: freed last).
  std::shared_ptr<void> library_handle;
  std::string library;  ///< path of the defining shared library ("" when built into the host)
  PluginKind kind = PluginKind::kStrategy;
  std::string name;
  std::string description;  ///< one line
  OptionsSchema schema;
  std::variant<StrategyFactory, ModelFactory, DatasetFactory> factory;
  StrategyTraits traits;  ///< strategies only
  ModelEstimator estimator;  ///< models only; empty when the plugin declares none
  ModelMemoryEstimator memory_estimator;  ///< models only; empty when the plugin declares none
  StrategyPlanner planner;  ///< strategies of the kit only (ABI 10.1): its plan as data; empty otherwise
};

class Registry {
 public:
  /// Adds a strategy. `make(const T& options)` returns a std::shared_ptr<Strategy-derived>.
  /// `traits` say how it uses devices and how exactly it reproduces `single` (defaults: one rank
  /// per device, exact); pass a Placement, an Equivalence or both, e.g. `strata::Placement::one_device()`.
  template <class T, class F>
  void add_strategy(std::string name, std::string description, Schema<T> schema, F make,
                    StrategyTraits traits = {}) {
    auto fn = [schema, make](const Options& o) -> std::shared_ptr<Strategy> { return make(schema.bind(o)); };
    const std::string key = name;
    add(PluginKind::kStrategy, std::move(name), std::move(description), schema.erased(), StrategyFactory(fn));
    set_traits(key, std::move(traits));
  }
  /// Adds a model. `make(const T& options, const ModelContext&)` returns std::shared_ptr<Model>.
  template <class T, class F>
  void add_model(std::string name, std::string description, Schema<T> schema, F make) {
    auto fn = [schema, make](const Options& o, const ModelContext& c) -> std::shared_ptr<Model> {
      return make(schema.bind(o), c);
    };
    add(PluginKind::kModel, std::move(name), std::move(description), schema.erased(), ModelFactory(fn));
  }
  /// As above, with `estimate(const T& options, const ModelContext&)` returning the parameter
  /// count (double) without allocating anything. The host checks it against the memory of the
  /// machine before it builds the model, so options asking for too much are a configuration error
  /// naming the bytes rather than an allocation failure (or minutes of building) later. It may
  /// throw OptionError for inconsistent options, as `make` would.
  template <class T, class F, class E>
  void add_model(std::string name, std::string description, Schema<T> schema, F make, E estimate) {
    const std::string key = name;
    add_model(std::move(name), std::move(description), schema, std::move(make));
    set_estimator(key, [schema, estimate](const Options& o, const ModelContext& c) -> double {
      return estimate(schema.bind(o), c);
    });
  }
  /// As above, with `estimate_memory(const T& options, const ModelContext&)` returning a
  /// ModelMemoryEstimate (activations per example, parameters per unit), also without allocating.
  template <class T, class F, class E, class M>
  void add_model(std::string name, std::string description, Schema<T> schema, F make, E estimate, M estimate_memory) {
    const std::string key = name;
    add_model(std::move(name), std::move(description), schema, std::move(make), std::move(estimate));
    set_memory_estimator(key, [schema, estimate_memory](const Options& o, const ModelContext& c) -> ModelMemoryEstimate {
      return estimate_memory(schema.bind(o), c);
    });
  }
  /// Adds a dataset. `make(const T& options, const DatasetContext&)` returns a std::shared_ptr<Dataset-derived>.
  template <class T, class F>
  void add_dataset(std::string name, std::string description, Schema<T> schema, F make) {
    auto fn = [schema, make](const Options& o, const DatasetContext& c) -> std::shared_ptr<Dataset> {
      return make(schema.bind(o), c);
    };
    add(PluginKind::kDataset, std::move(name), std::move(description), schema.erased(), DatasetFactory(fn));
  }

  /// Adds an entry; throws PluginError on a duplicate name of the same kind.
  void add(PluginKind kind, std::string name, std::string description, OptionsSchema schema,
           std::variant<StrategyFactory, ModelFactory, DatasetFactory> factory);

  /// Sets the parameter estimator of model `name` (added before).
  void set_estimator(const std::string& name, ModelEstimator estimator);
  /// Sets the memory estimator of model `name` (added before).
  void set_memory_estimator(const std::string& name, ModelMemoryEstimator estimator) {
    auto it = entries_.find({PluginKind::kModel, name});
    if (it == entries_.end()) throw_not_added("set_memory_estimator", name);
    it->second.memory_estimator = std::move(estimator);
  }
  /// Declares strategy `name` (added before) a plan of the kit: `plan(const T& options, const
  /// Topology&)` returns its PlanOutline without building anything (the kit's strata::add_plan
  /// calls this with the Plan the strategy's setup takes over).
  template <class T, class P>
  void set_plan(const std::string& name, Schema<T> schema, P plan) {
    set_planner(name, [schema, plan](const Options& o, const Topology& t) -> PlanOutline { return plan(schema.bind(o), t); });
  }
  void set_planner(const std::string& name, StrategyPlanner planner);
  /// Sets the traits of strategy `name` (added before); checks them against its schema.
  void set_traits(const std::string& name, StrategyTraits traits);
  /// The entry of `name`, or nullptr.
  const RegistryEntry* find(PluginKind kind, const std::string& name) const;
  /// The entry of `name`; throws ConfigError-free PluginError listing known names and a suggestion.
  const RegistryEntry& at(PluginKind kind, const std::string& name) const;
  /// Names of one kind, sorted.
  std::vector<std::string> names(PluginKind kind) const;
  /// All entries, sorted by kind then name.
  std::vector<const RegistryEntry*> entries() const;

  /// Creates objects through an entry. strata::Error (OptionError included) passes through; any
  /// other exception is rethrown as PluginError naming the library. The object keeps its library
  /// loaded.
  std::shared_ptr<Strategy> create_strategy(const std::string& name, const Options& options) const;
  std::shared_ptr<Model> create_model(const std::string& name, const Options& options,
                                      const ModelContext& context) const;
  std::shared_ptr<Dataset> create_dataset(const std::string& name, const Options& options,
                                          const DatasetContext& context) const;
  /// The parameter count model `name` would have, without building it; nullopt when its plugin
  /// declares no estimator. Errors as for create_model.
  std::optional<double> estimate_model(const std::string& name, const Options& options,
                                       const ModelContext& context) const;

  /// The memory model `name` would need (activations per example, parameters per unit), without
  /// building it; nullopt when its plugin declares no memory estimator. Errors pass through.
  std::optional<ModelMemoryEstimate> estimate_model_memory(const std::string& name, const Options& options,
                                                           const ModelContext& context) const {
    const auto& e = at(PluginKind::kModel, name);
    if (!e.memory_estimator) return std::nullopt;
    return e.memory_estimator(options, context);
  }

  /// Set by the loader while a library registers: the library attached to new entries.
  void set_current_library(std::string path, std::shared_ptr<void> handle);

 private:
  [[noreturn]] void throw_not_added(const char* what, const std::string& name) const {
    throw PluginError(current_library_, std::string(what) + ": no model '" + name + "' was added.",
                      "Add the model before its estimator.");
  }
  std::map<std::pair<PluginKind, std::string>, RegistryEntry> entries_;
  std::string current_library_;
  std::shared_ptr<void> current_handle_;
};

}  // namespace strata
