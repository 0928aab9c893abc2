#pragma once
/// \file registry.hpp
/// Named factories of strategies, models and datasets. A plugin's register function adds one or
/// more entries, each with a one-line description and an options schema. Names are unique per
/// kind: a second registration of a name fails loudly, naming both libraries.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

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
};

class Registry {
 public:
  /// Adds a strategy. `make(const T& options)` returns a std::shared_ptr<Strategy-derived>.
  template <class T, class F>
  void add_strategy(std::string name, std::string description, Schema<T> schema, F make) {
    auto fn = [schema, make](const Options& o) -> std::shared_ptr<Strategy> { return make(schema.bind(o)); };
    add(PluginKind::kStrategy, std::move(name), std::move(description), schema.erased(), StrategyFactory(fn));
  }
  /// Adds a model. `make(const T& options, const ModelContext&)` returns std::shared_ptr<Model>.
  template <class T, class F>
  void add_model(std::string name, std::string description, Schema<T> schema, F make) {
    auto fn = [schema, make](const Options& o, const ModelContext& c) -> std::shared_ptr<Model> {
      return make(schema.bind(o), c);
    };
    add(PluginKind::kModel, std::move(name), std::move(description), schema.erased(), ModelFactory(fn));
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

  /// The entry of `name`, or nullptr.
  const RegistryEntry* find(PluginKind kind, const std::string& name) const;
  /// The entry of `name`; throws ConfigError-free PluginError listing known names and a suggestion.
  const RegistryEntry& at(PluginKind kind, const std::string& name) const;
  /// Names of one kind, sorted.
  std::vector<std::string> names(PluginKind kind) const;
  /// All entries, sorted by kind then name.
  std::vector<const RegistryEntry*> entries() const;

  /// Creates objects through an entry. Exceptions other than OptionError are rethrown as
  /// PluginError naming the library; the object keeps its library loaded.
  std::shared_ptr<Strategy> create_strategy(const std::string& name, const Options& options) const;
  std::shared_ptr<Model> create_model(const std::string& name, const Options& options,
                                      const ModelContext& context) const;
  std::shared_ptr<Dataset> create_dataset(const std::string& name, const Options& options,
                                          const DatasetContext& context) const;

  /// Set by the loader while a library registers: the library attached to new entries.
  void set_current_library(std::string path, std::shared_ptr<void> handle);

 private:
  std::map<std::pair<PluginKind, std::string>, RegistryEntry> entries_;
  std::string current_library_;
  std::shared_ptr<void> current_handle_;
};

}  // namespace strata
