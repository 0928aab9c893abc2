#include "strata/registry.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "strata/errors.hpp"
#include "text/errors_text.hpp"
#include "text/suggest.hpp"

namespace strata {

const char* kind_name(PluginKind kind) noexcept {
  switch (kind) {
    case PluginKind::kStrategy: return "strategy";
    case PluginKind::kModel: return "model";
    case PluginKind::kDataset: return "dataset";
  }
  return "?";
}

namespace {
std::string library_label(const std::string& path) {
  return path.empty() ? std::string("the host") : std::filesystem::path(path).filename().string();
}

/// Keeps the plugin library loaded while an object it created is alive. Members are destroyed
/// in reverse order: the object first, then (possibly) the library.
template <class T>
struct KeepAlive {
  std::shared_ptr<void> library;
  std::shared_ptr<T> object;
};

template <class T>
std::shared_ptr<T> keep_library(std::shared_ptr<T> object, const std::shared_ptr<void>& library) {
  if (!object || !library) return object;
  auto holder = std::make_shared<KeepAlive<T>>(KeepAlive<T>{library, object});
  T* raw = holder->object.get();
  return std::shared_ptr<T>(std::move(holder), raw);
}

template <class F>
auto guarded_create(const RegistryEntry& entry, F make) {
  try {
    auto object = make();
    if (!object)
      throw PluginError(entry.library, std::string(kind_name(entry.kind)) + " '" + entry.name +
                                           "' from " + library_label(entry.library) + " returned no object.",
                        "This is a bug in the plugin; report it to its authors.");
    return keep_library(std::move(object), entry.library_handle);
  } catch (const OptionError&) {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw PluginError(entry.library,
                      std::string(kind_name(entry.kind)) + " '" + entry.name + "' from " +
                          library_label(entry.library) + " failed while being created: " +
                          detail::exception_text(e),
                      "Check the plugin's options (`strata describe " + entry.name + "`).");
  }
}
}  // namespace

void Registry::set_current_library(std::string path, std::shared_ptr<void> handle) {
  current_library_ = std::move(path);
  current_handle_ = std::move(handle);
}

void Registry::add(PluginKind kind, std::string name, std::string description, OptionsSchema schema,
                   std::variant<StrategyFactory, ModelFactory, DatasetFactory> factory) {
  auto key = std::make_pair(kind, name);
  if (auto it = entries_.find(key); it != entries_.end()) {
    throw PluginError(current_library_,
                      std::string("duplicate ") + kind_name(kind) + " name '" + name + "': registered by " +
                          library_label(it->second.library) + " and again by " +
                          library_label(current_library_) + ".",
                      "Remove one of the two libraries from the plugin search path, or rename one plugin.");
  }
  RegistryEntry entry;
  entry.library_handle = current_handle_;
  entry.library = current_library_;
  entry.kind = kind;
  entry.name = std::move(name);
  entry.description = std::move(description);
  entry.schema = std::move(schema);
  entry.factory = std::move(factory);
  entries_.emplace(std::move(key), std::move(entry));
}

void Registry::set_estimator(const std::string& name, ModelEstimator estimator) {
  auto it = entries_.find({PluginKind::kModel, name});
  if (it == entries_.end())
    throw PluginError(current_library_, "set_estimator: no model '" + name + "' was added.",
                      "Add the model before its estimator.");
  it->second.estimator = std::move(estimator);
}

void Registry::set_scheduler(const std::string& name, StrategyScheduler scheduler) {
  auto it = entries_.find({PluginKind::kStrategy, name});
  if (it == entries_.end())
    throw PluginError(current_library_, "set_schedule: no strategy '" + name + "' was added.",
                      "Add the strategy before its schedule.");
  it->second.scheduler = std::move(scheduler);
}

void Registry::set_traits(const std::string& name, StrategyTraits traits) {
  auto it = entries_.find({PluginKind::kStrategy, name});
  if (it == entries_.end())
    throw PluginError(current_library_, "set_traits: no strategy '" + name + "' was added.",
                      "Add the strategy before setting its traits.");
  const Placement& placement = traits.placement;
  if (placement.kind == Placement::Kind::kDevicesInProcess) {
    const auto& specs = it->second.schema.specs;
    const bool has = std::any_of(specs.begin(), specs.end(), [&](const OptionSpec& s) {
      return s.name == placement.devices_option && s.type == OptionType::kInt;
    });
    if (!has)
      throw PluginError(current_library_,
                        "strategy '" + name + "' places itself on the devices of one process, but its schema has "
                        "no integer option '" + placement.devices_option + "' for the device count.",
                        "Declare that option in the schema, or name the right one in Placement::devices_in_process.");
  }
  const Equivalence& eq = traits.equivalence;
  if (!eq.exact && !(eq.loss_band > 0 && std::isfinite(eq.loss_band)))
    throw PluginError(current_library_,
                      "strategy '" + name + "' declares an equivalence that is not exact without a positive loss band.",
                      "State the band on the final loss, e.g. Equivalence::within_loss_band(0.05, \"why\").");
  if (eq.steps < 0)
    throw PluginError(current_library_, "strategy '" + name + "' declares a loss band after a negative number of steps.",
                      "Give the steps after which the band holds, or 0 for the check's.");
  // Every option an equivalence or a matrix row names must be one of the strategy's.
  const auto known = [&](const std::string& option) { return it->second.schema.find(option) != nullptr; };
  std::vector<std::string> unknown;
  for (const auto& [option, value] : eq.exact_when)  // a dotted name is a condition on the experiment
    if (option.find('.') == std::string::npos && !known(option)) unknown.push_back(option);
  for (const auto& row : traits.option_matrix)
    for (const auto& [option, value] : row.options)
      if (!known(option)) unknown.push_back(option);
  if (!unknown.empty())
    throw PluginError(current_library_,
                      "strategy '" + name + "' names options its schema does not have in its equivalence or option "
                      "matrix: " + detail::join(unknown) + ".",
                      "Name options of the strategy's own schema (`strata describe " + name + "`).");
  it->second.traits = std::move(traits);
}

const RegistryEntry* Registry::find(PluginKind kind, const std::string& name) const {
  auto it = entries_.find({kind, name});
  return it == entries_.end() ? nullptr : &it->second;
}

const RegistryEntry& Registry::at(PluginKind kind, const std::string& name) const {
  if (const auto* e = find(kind, name)) return *e;
  auto known = names(kind);
  throw PluginError({}, std::string("unknown ") + kind_name(kind) + " '" + detail::shown(name) + "'; available: " +
                            (known.empty() ? std::string("none") : detail::join(known)) + "." +
                            detail::did_you_mean(name, known),
                    "Use one of the available names, or add the directory of the plugin that provides it to "
                    "STRATA_PLUGIN_PATH or [plugins] paths.");
}

std::vector<std::string> Registry::names(PluginKind kind) const {
  std::vector<std::string> out;
  for (const auto& [key, entry] : entries_)
    if (key.first == kind) out.push_back(key.second);
  return out;
}

std::vector<const RegistryEntry*> Registry::entries() const {
  std::vector<const RegistryEntry*> out;
  for (const auto& [key, entry] : entries_) out.push_back(&entry);
  return out;
}

std::shared_ptr<Strategy> Registry::create_strategy(const std::string& name, const Options& options) const {
  const auto& e = at(PluginKind::kStrategy, name);
  return guarded_create(e, [&] { return std::get<StrategyFactory>(e.factory)(options); });
}

std::shared_ptr<Model> Registry::create_model(const std::string& name, const Options& options,
                                              const ModelContext& context) const {
  const auto& e = at(PluginKind::kModel, name);
  return guarded_create(e, [&] { return std::get<ModelFactory>(e.factory)(options, context); });
}

std::optional<double> Registry::estimate_model(const std::string& name, const Options& options,
                                               const ModelContext& context) const {
  const auto& e = at(PluginKind::kModel, name);
  if (!e.estimator) return std::nullopt;
  return *guarded_create(e, [&] { return std::make_shared<double>(e.estimator(options, context)); });
}

std::shared_ptr<Dataset> Registry::create_dataset(const std::string& name, const Options& options,
                                                  const DatasetContext& context) const {
  const auto& e = at(PluginKind::kDataset, name);
  return guarded_create(e, [&] { return std::get<DatasetFactory>(e.factory)(options, context); });
}

}  // namespace strata
