#include "run.hpp"

#include <iostream>

#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include "config/experiment.hpp"
#include "io/run_dir.hpp"
#include "plugin_loader.hpp"
#include "strata/dataset.hpp"
#include "strata/errors.hpp"
#include "strata/logger.hpp"
#include "strata/model.hpp"
#include "strata/strategy.hpp"
#include "text/suggest.hpp"
#include "train/trainer.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

/// Loads every plugin on the search path (plus the experiment's [plugins] paths).
void load_plugins(Registry& registry, const Experiment* experiment) {
  PluginLoader loader(registry);
  std::vector<fs::path> extra;
  if (experiment) {
    extra = experiment->plugin_paths();
    for (std::size_t i = 0; i < extra.size(); ++i)
      if (!fs::exists(extra[i]))
        throw experiment->error("plugins.paths",
                                fmt::format("plugin path \"{}\" does not exist.", extra[i].string()),
                                "Paths are relative to the experiment file; fix or remove the entry.");
  }
  for (const auto& dir : plugin_search_path(extra))
    if (fs::exists(dir)) loader.load_path(dir);
}

/// Runs a plugin factory; an OptionError becomes a ConfigError at that option's position.
template <class F>
auto create(const Experiment& e, const std::string& section, F make) {
  try {
    return make();
  } catch (const OptionError& err) {
    throw e.error(section + "." + err.option(), err.what(), err.fix());
  }
}

torch::Device resolve_device(const Experiment& e) {
  const auto& d = e.train.device;
  if (d == "cpu") return torch::kCPU;
  const bool cuda = torch::cuda::is_available();
  if (d == "auto") return cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (!cuda)
    throw e.error("train.device", "device \"" + d + "\" was requested but no CUDA device is available.",
                  "Use device = \"cpu\" or \"auto\", or run on a machine with a GPU.");
  torch::Device device(d);
  const auto count = static_cast<int>(torch::cuda::device_count());
  if (device.has_index() && device.index() >= count)
    throw e.error("train.device", fmt::format("device \"{}\" does not exist; this machine has {} CUDA device(s).", d, count),
                  "Use an index below the device count.");
  return device.has_index() ? device : torch::Device(torch::kCUDA, 0);
}

/// Everything a run needs, built and validated before any training.
struct Prepared {
  Experiment experiment;
  Registry registry;
  std::shared_ptr<Dataset> dataset;
  std::shared_ptr<Model> model;
  std::shared_ptr<Strategy> strategy;
  torch::Device device{torch::kCPU};
};

std::unique_ptr<Prepared> prepare(const RunRequest& request) {
  auto p = std::make_unique<Prepared>();
  p->experiment = load_experiment(request.file, request.overrides);
  Experiment& e = p->experiment;
  load_plugins(p->registry, &e);
  validate_plugin_sections(e, p->registry);

  if (e.distributed.nproc > 1)
    throw e.error("distributed.nproc",
                  fmt::format("nproc = {}, but this version of strata runs every job in one process.", e.distributed.nproc),
                  "Set [distributed] nproc = 1.");
  p->device = resolve_device(e);
  if (e.train.threads > 0) torch::set_num_threads(static_cast<int>(e.train.threads));

  DatasetContext dataset_context{e.directory(), static_cast<std::uint64_t>(e.train.seed)};
  p->dataset = create(e, "dataset", [&] {
    return p->registry.create_dataset(e.dataset.name, e.dataset.options, dataset_context);
  });
  const auto train_size = p->dataset->size(Split::kTrain);
  if (e.train.global_batch_size > train_size)
    throw e.error("train.global_batch_size",
                  fmt::format("global_batch_size {} exceeds the {} training examples of dataset '{}'.",
                              e.train.global_batch_size, train_size, e.dataset.name),
                  "Use a smaller global batch or a larger dataset.");
  if (p->dataset->size(Split::kEval) <= 0)
    throw e.error("dataset.name", "dataset '" + e.dataset.name + "' has no evaluation examples.",
                  "Configure the dataset with a non-empty eval split.");

  // Same seed on every rank: every replica starts from the same parameters.
  torch::manual_seed(static_cast<std::uint64_t>(e.train.seed));
  ModelContext model_context{p->dataset->input_shape(), p->dataset->num_classes()};
  p->model = create(e, "model", [&] { return p->registry.create_model(e.model.name, e.model.options, model_context); });
  p->strategy = create(e, "strategy", [&] { return p->registry.create_strategy(e.strategy.name, e.strategy.options); });
  return p;
}

}  // namespace

void validate_experiment(const RunRequest& request) {
  auto p = prepare(request);
  const auto& e = p->experiment;
  std::cout << fmt::format("{}: ok (model {} with {} parameters, dataset {}, strategy {}, {} steps on {})\n",
                           request.file.string(), e.model.name, p->model->parameter_count(), e.dataset.name,
                           e.strategy.name, e.train.steps, p->device.str());
}

void run_experiment(const RunRequest& request) {
  auto p = prepare(request);
  const auto& e = p->experiment;
  const fs::path run_dir = make_run_directory(request.out, e.experiment.out_dir, e.experiment.name);
  write_text_file(run_dir / "config.toml", resolved_toml(e));
  auto comm = make_local_comm();
  Logger log(comm->rank(), comm->world_size());
  TrainerParts parts;
  parts.experiment = &e;
  parts.dataset = p->dataset;
  parts.model = p->model;
  parts.strategy = p->strategy;
  parts.comm = comm.get();
  parts.log = &log;
  parts.device = p->device;
  parts.run_dir = run_dir;
  train(std::move(parts));
}

void list_plugins() {
  Registry registry;
  load_plugins(registry, nullptr);
  std::size_t name_width = 4, description_width = 11;
  for (const auto* entry : registry.entries()) {
    name_width = std::max(name_width, entry->name.size());
    description_width = std::max(description_width, entry->description.size());
  }
  const auto row = [&](const std::string& kind, const std::string& name, const std::string& description,
                       const std::string& library) {
    std::cout << fmt::format("{:<9} {:<{}}  {:<{}}  {}\n", kind, name, name_width, description, description_width,
                             library);
  };
  row("KIND", "NAME", "DESCRIPTION", "LIBRARY");
  for (const auto* entry : registry.entries())
    row(kind_name(entry->kind), entry->name, entry->description, entry->library);
}

namespace {
void print_schema(const std::string& title, const OptionsSchema& schema) {
  std::cout << title << "\n";
  if (schema.specs.empty()) std::cout << "  (no options)\n";
  for (const auto& s : schema.specs) {
    std::cout << fmt::format("  {:<20} {:<18} default {}\n", s.name, type_name(s.type), to_toml(s.default_value));
    std::cout << fmt::format("  {:<20} {}{}\n", "", s.doc,
                             s.constraint_text().empty() ? "" : " (" + s.constraint_text() + ")");
  }
}
}  // namespace

void describe(const std::string& name) {
  if (const auto* schema = core_section_schema(name)) {
    print_schema(fmt::format("[{}] (core section)", name), *schema);
    return;
  }
  Registry registry;
  load_plugins(registry, nullptr);
  std::vector<std::string> all = core_section_names();
  bool found = false;
  for (const auto* entry : registry.entries()) {
    all.push_back(entry->name);
    if (entry->name != name) continue;
    found = true;
    print_schema(fmt::format("{} '{}': {}\n  library: {}\n\n[{}] name = \"{}\", options:", kind_name(entry->kind),
                             entry->name, entry->description, entry->library, kind_name(entry->kind), entry->name),
                 entry->schema);
  }
  if (!found)
    throw PluginError({}, fmt::format("nothing named '{}' to describe.{} Known: {}.", name, detail::did_you_mean(name, all),
                                 detail::join(all)),
                     "Run `strata plugins` for plugin names; core sections are " +
                         detail::join(core_section_names()) + ".");
}

}  // namespace strata
