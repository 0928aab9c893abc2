#include "prepare.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <thread>

#include <ATen/Context.h>
#include <fmt/format.h>
#include <torch/utils.h>

#include "device/cpu_float.hpp"
#include "device/host_memory.hpp"
#include "estimate/fit_experiment.hpp"
#include "launch/device_choice.hpp"
#include "launch/env_checks.hpp"
#include "strata/dataset.hpp"
#include "strata/errors.hpp"
#include "strata/model.hpp"
#include "strata/strategy.hpp"
#include "text/suggest.hpp"
#include "text/units.hpp"
#include "train/run_checks.hpp"
#include "train/saved_model.hpp"
#include "train/tensor_memory.hpp"

namespace strata {

namespace fs = std::filesystem;

std::vector<PluginLoadFailure> load_plugins(Registry& registry, const Experiment* experiment) {
  std::vector<fs::path> extra;
  if (experiment) {
    extra = experiment->plugin_paths();
    for (std::size_t i = 0; i < extra.size(); ++i)
      if (!fs::exists(extra[i]))
        throw experiment->error("plugins.paths",
                                fmt::format("plugin path \"{}\" does not exist.", extra[i].string()),
                                "Paths are relative to the experiment file; fix or remove the entry.");
  }
  return load_search_path(registry, extra);
}

namespace {

/// A model, dataset or strategy that is not registered while some library did not load: the
/// error names that library, where validate_plugin_sections could only list the available names.
void check_plugins_loaded(const Experiment& e, const Registry& registry,
                          const std::vector<PluginLoadFailure>& failures) {
  const std::tuple<const char*, PluginKind, const std::string*> sections[] = {
      {"model", PluginKind::kModel, &e.model.name},
      {"dataset", PluginKind::kDataset, &e.dataset.name},
      {"strategy", PluginKind::kStrategy, &e.strategy.name}};
  for (const auto& [section, kind, name] : sections)
    if (!name->empty())
      if (auto why = explain_missing(registry, kind, *name, failures))
        throw e.error(std::string(section) + ".name", why->message, why->fix);
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

/// This rank's device (launch/device_choice.hpp: it follows what the launcher lets the rank see);
/// a request that cannot be met is a config error at train.device.
DeviceChoice resolve_device(const Experiment& e, const WorldInfo& world) {
  try {
    return choose_device(e.train.device, world.local_rank, world.local_world_size, device_view(world));
  } catch (const Error& err) {
    throw e.error("train.device", err.what(), err.fix());
  }
}

/// [train] deterministic: the kernels that give the same bits on every run, before any CUDA work
/// (cuBLAS reads its workspace setting when it creates a handle). An op with no deterministic
/// kernel then fails with ATen's message naming it.
void use_deterministic_kernels() {
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  auto& context = at::globalContext();
  context.setDeterministicAlgorithms(true, /*warn_only=*/false);
  context.setDeterministicCuDNN(true);
  context.setBenchmarkCuDNN(false);
}

/// A strategy that runs in one process rejects a job of several ranks (it would train
/// independent, diverging replicas).
void check_placement(const Experiment& e, const Placement& placement, int world_size) {
  if (world_size == 1 || placement.kind == Placement::Kind::kRankPerDevice) return;
  if (placement.kind == Placement::Kind::kOneDevice)
    throw e.error("strategy.name",
                  fmt::format("strategy '{}' runs in one process on one device, but this job has {} ranks.",
                              e.strategy.name, world_size),
                  "Use nproc = 1, or a strategy with one rank per device (ddp, fsdp, zero1, zero2, zero3).");
  throw e.error("strategy.name",
                fmt::format("strategy '{}' drives several devices from one process (option `{}`), but this job "
                            "has {} ranks.",
                            e.strategy.name, placement.devices_option, world_size),
                fmt::format("Use nproc = 1 and set strategy.{} to the number of devices.", placement.devices_option));
}

constexpr double kValidateBuildBytes = 1024.0 * 1024 * 1024;


/// Every rank builds its model in host memory first: the parameters of this host's ranks, as
/// float32, must fit what the host has available, else the model's options are the error.
void check_model_fits(const Experiment& e, double parameters, int local_ranks,
                      const std::optional<HostMemory>& available) {
  const double bytes = parameters * kFloat32Bytes * std::max(1, local_ranks);
  if (!available || bytes <= available->bytes) return;
  std::string options;
  for (const auto& [key, value] : e.model.options.values())
    options += fmt::format("{} {} = {}", options.empty() ? "" : ",", key, detail::shown(to_toml(value), 60));
  throw e.error("model",
                fmt::format("model '{}' with{} would have {:.4g} parameters, {} as float32{}, more than the {} of "
                            "{}.",
                            e.model.name, options.empty() ? std::string(" no options") : options, parameters,
                            gib(parameters * kFloat32Bytes),
                            local_ranks > 1 ? fmt::format(" per rank, {} for this host's {} ranks", gib(bytes), local_ranks)
                                            : std::string(),
                            gib(available->bytes), available->source),
                "Choose smaller model options (`strata describe " + e.model.name +
                    "` lists them), fewer ranks per host, or a machine with more memory.");
}

/// A [train] init_from that does not fit the model, as a config error at train.init_from; where
/// it is a Hugging Face directory and the model could take its shapes (config_from), that is the fix.
ConfigError init_from_error(const RankRun& p, const Error& err) {
  const Experiment& e = p.experiment;
  std::string what = err.what();
  if (const std::string key = "train.init_from: "; what.rfind(key, 0) == 0) what.erase(0, key.size());
  std::string fix = err.fix();
  std::error_code ec;
  const fs::path dir = e.train.init_from;
  const bool hf_dir = fs::is_regular_file(dir / "config.json", ec);
  const bool takes_config = p.registry.at(PluginKind::kModel, e.model.name).schema.find("config_from") != nullptr;
  const auto* config_from = [&]() -> const OptionValue* {
    const auto& v = e.model.options.values();
    const auto it = v.find("config_from");
    return it == v.end() ? nullptr : &it->second;
  }();
  if (hf_dir && takes_config && (config_from == nullptr || to_toml(*config_from) != to_toml(OptionValue(dir.string()))))
    fix = fmt::format("Set model.config_from = \"{}\" (the same directory), so that the model takes the shapes of "
                      "its config.json; or point init_from at a model saved with these options.",
                      e.train.init_from);
  return e.error("train.init_from", what, fix);
}

/// Loads [train] init_from into the model just built, so that a file that does not fit is found
/// before anything is written (and by validate).
void load_init_from(RankRun& p) {
  const auto& t = p.experiment.train;
  try {
    p.init_skipped = load_state_dict(*p.model, t.init_from, t.init_partial);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& err) {
    throw init_from_error(p, err);
  }
  p.init_loaded = "model initialized from " + t.init_from;
}


}  // namespace

std::string resolve_backend(const Experiment& e, const torch::Device& device) {
  const auto& b = e.distributed.backend;
  if (b == "nccl" && !device.is_cuda())
    throw e.error("distributed.backend", "backend \"nccl\" needs CUDA tensors, but this run uses the CPU.",
                  "Use backend = \"gloo\" (or \"auto\") for CPU runs.");
  if (b != "auto") return b;
  return device.is_cuda() ? "nccl" : "gloo";
}

int cpu_threads_per_rank(const Experiment& e, int local_world_size) {
  if (e.train.threads > 0) return static_cast<int>(e.train.threads);
  if (local_world_size > 1) return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_world_size);
  return 0;
}

std::unique_ptr<RankRun> prepare(Experiment experiment, const WorldInfo& world, Purpose purpose, bool resuming,
                                 const std::string& device_name) {
  auto p = std::make_unique<RankRun>();
  p->world = world;
  p->experiment = std::move(experiment);
  Experiment& e = p->experiment;
  check_plugins_loaded(e, p->registry, load_plugins(p->registry, &e));
  validate_plugin_sections(e, p->registry);
  check_placement(e, p->registry.at(PluginKind::kStrategy, e.strategy.name).traits.placement, world.world_size);
  check_plan_fits_world(e, p->registry, world);

  const std::int64_t per_step = static_cast<std::int64_t>(world.world_size) * e.train.micro_batches;
  if (e.train.global_batch_size % per_step != 0)
    throw e.error("train.global_batch_size",
                  fmt::format("global_batch_size {} is not divisible by world size {} x micro_batches {} = {}.",
                              e.train.global_batch_size, world.world_size, e.train.micro_batches, per_step),
                  "Choose a global batch that is a multiple of world size x micro_batches (the global batch is "
                  "the same whatever the world size).");
  if (!e.train.init_from.empty()) {
    try {
      check_saved_model(e.train.init_from);
    } catch (const Error& err) {
      std::string what = err.what();
      if (const std::string key = "train.init_from: "; what.rfind(key, 0) == 0) what.erase(0, key.size());
      throw e.error("train.init_from", what, err.fix());
    }
  }
  const auto choice = resolve_device(e, world);
  p->device = choice.device;
  p->device_note = choice.note;
  // A backend that cannot carry this device's tensors is a config error, as are ranks that NCCL
  // would refuse to share a GPU (found here, not after a rendezvous timeout).
  const std::string backend = resolve_backend(e, p->device);
  try {
    check_shared_gpu(e.train.device, backend, world.local_world_size);
  } catch (const Error& err) {
    throw e.error("train.device", err.what(), err.fix());
  }
  // Both ways: a process that checked a deterministic experiment may run another (strata compare).
  if (e.train.deterministic)
    use_deterministic_kernels();
  else
    at::globalContext().setDeterministicAlgorithms(false, /*warn_only=*/false);
  if (const int threads = cpu_threads_per_rank(e, world.local_world_size); threads > 0) torch::set_num_threads(threads);
  // Denormals flushed to zero in this thread and the intra-op pool; the data loader's threads,
  // created later, inherit it.
  flush_denormals(e.train.flush_denormals);

  DatasetContext dataset_context{std::filesystem::absolute(e.directory()).lexically_normal(),
                                 static_cast<std::uint64_t>(e.train.seed)};
  {
    tensor_memory::Untracked host_data;  // the dataset lives on the host, never on a GPU
    p->dataset = create(e, "dataset", [&] {
      return p->registry.create_dataset(e.dataset.name, e.dataset.options, dataset_context);
    });
  }
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
  const ModelContext model_context{p->dataset->spec(), e.directory()};
  p->estimated_parameters =
      create(e, "model", [&] { return p->registry.estimate_model(e.model.name, e.model.options, model_context); });
  const auto host_available = available_host_memory();  // read once: both fit checks compare with it
  if (p->estimated_parameters) check_model_fits(e, *p->estimated_parameters, world.local_world_size, host_available);
  p->strategy = create(e, "strategy", [&] { return p->registry.create_strategy(e.strategy.name, e.strategy.options); });
  if (p->estimated_parameters) {
    const auto memory = create(e, "model", [&] {
      return p->registry.estimate_model_memory(e.model.name, e.model.options, model_context);
    });
    auto fit = estimate::check_strategy_fits(e, p->registry, world, p->device, *p->estimated_parameters, memory,
                                             host_available, device_name, model_context.data.input_shape);
    p->memory_fit = std::move(fit.line);
    p->memory_warning = std::move(fit.warning);
  }
  if (purpose == Purpose::kValidate && p->estimated_parameters &&
      *p->estimated_parameters * kFloat32Bytes > kValidateBuildBytes)
    return p;  // validated from its estimate; `run` builds it
  p->model = create(e, "model", [&] { return p->registry.create_model(e.model.name, e.model.options, model_context); });
  if (e.train.activation_checkpointing == "full")
    p->model->set_activation_checkpointing(static_cast<int>(e.train.activation_checkpointing_every));
  if (!e.train.init_from.empty() && !resuming) load_init_from(*p);
  return p;
}

}  // namespace strata
