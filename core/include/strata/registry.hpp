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
#include "strata/schedule.hpp"

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

/// How closely a strategy reproduces another strategy's training (`strata check` enforces it):
///  - exact: every tensor of the final model equals `single`'s up to floating-point reduction
///    order (the default); possibly only under named option values (`exact_when`), e.g. an outer
///    learning rate of 1 without momentum, which the check then sets for its tensor-by-tensor runs;
///  - a loss band: after `steps` optimizer steps (0: the check's), the final training loss is
///    within `loss_band` (absolute, in the loss's units) of the `reference` strategy's at the same
///    world size (the reference on one device runs at world size 1), for a
///    strategy that differs by design (local steps, compressed gradients). A strategy exact only
///    under some option values declares the band its defaults keep.
struct Equivalence {
  bool exact = true;
  /// Exact only with these options (name, TOML value); empty: exact with any options. A dotted
  /// name is a condition on the experiment instead (e.g. {"optimizer.name", "\"sgd\""} for a
  /// strategy exact only with an optimizer linear in the gradient): `strata check` tests exactness
  /// on the workloads that meet it and says which do not.
  std::vector<std::pair<std::string, std::string>> exact_when;
  double loss_band = 0;              ///< > 0: the loss band, absolute, around the reference's final loss
  std::string reference = "single";  ///< the strategy the band is measured against
  std::int64_t steps = 0;            ///< the band holds after this many steps (0: the check's)
  std::string reason;                ///< why it differs (shown in the check's table)

  /// Exact with `options` set (name, TOML value), within `band` of single's loss with the defaults.
  static Equivalence exact_under(std::vector<std::pair<std::string, std::string>> options, double band,
                                 std::string reason) {
    Equivalence e;
    e.exact = false;
    e.exact_when = std::move(options);
    e.loss_band = band;
    e.reason = std::move(reason);
    return e;
  }
  /// Within `band` of `reference`'s final loss after `steps` steps (0: the check's).
  static Equivalence within_loss_band(double band, std::string reason, std::string reference = "single",
                                      std::int64_t steps = 0) {
    Equivalence e;
    e.exact = false;
    e.loss_band = band;
    e.reference = std::move(reference);
    e.steps = steps;
    e.reason = std::move(reason);
    return e;
  }
};

/// One row of the option matrix `strata check` runs besides a strategy's defaults: a label and
/// the option values (name, TOML value). A row whose schedule does not apply at a world size
/// (a group size that does not divide it) is skipped there.
struct OptionRow {
  std::string label;
  std::vector<std::pair<std::string, std::string>> options;
};

/// A strategy's step for its options at a topology (strata/schedule.hpp): what `strata check`,
/// `strata estimate` and the fit check read. Throws OptionError for options that cannot be planned.
using StrategyScheduler = std::function<Schedule(const Options&, const ScheduleInput&)>;

/// What the host needs to know about a strategy besides its options.
struct StrategyTraits {
  StrategyTraits() = default;
  StrategyTraits(Placement p, Equivalence e = {}, std::vector<OptionRow> matrix = {})  // NOLINT
      : placement(std::move(p)), equivalence(std::move(e)), option_matrix(std::move(matrix)) {}
  StrategyTraits(Equivalence e) : equivalence(std::move(e)) {}  // NOLINT
  Placement placement;
  Equivalence equivalence;
  /// Option values `strata check` runs besides the defaults (fsdp's sharding strategies, hpz's
  /// sub-group sizes), each held to its own schedule.
  std::vector<OptionRow> option_matrix;
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
  /// Its step as data (strata/schedule.hpp); empty when the strategy declares none (then `strata
  /// check` only counts its traffic and `strata estimate` predicts it as a replica that does not
  /// communicate, saying so).
  StrategyScheduler scheduler;
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
  /// Declares the schedule of strategy `name` (added before): `schedule(const T& options, const
  /// ScheduleInput&)` returns its strata::Schedule without building anything (the kit's
  /// strata::add_plan calls this with the Plan the strategy's setup takes over).
  template <class T, class P>
  void set_schedule(const std::string& name, Schema<T> schema, P schedule) {
    set_scheduler(name, [schema, schedule](const Options& o, const ScheduleInput& in) -> Schedule {
      return schedule(schema.bind(o), in);
    });
  }
  void set_scheduler(const std::string& name, StrategyScheduler scheduler);
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
