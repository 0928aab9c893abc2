#include "estimate/fit_experiment.hpp"

#include <algorithm>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/experiment.hpp"
#include "device/named_devices.hpp"
#include "estimate/fit.hpp"
#include "estimate/profile.hpp"
#include "strata/errors.hpp"
#include "text/units.hpp"
#include "train/device_memory.hpp"

namespace strata::estimate {

namespace fs = std::filesystem;

StrategyModel experiment_strategy_model(const Experiment& e, const Registry& registry, const std::string& name) {
  return strategy_model(registry, name, name == e.strategy.name ? e.strategy.options : Options{});
}

std::vector<std::string> fit_candidates(const Registry& registry, int world) {
  std::vector<std::string> names;
  for (const auto* entry : registry.entries()) {
    if (entry->kind != PluginKind::kStrategy || !entry->scheduler) continue;
    const auto kind = entry->traits.placement.kind;
    if (kind == Placement::Kind::kRankPerDevice || (kind == Placement::Kind::kOneDevice && world == 1))
      names.push_back(entry->name);
  }
  return names;
}

namespace {

/// Activations per example that [train] memory_profile measured, with where they come from.
struct MeasuredActivations {
  double per_example = 0;
  std::string source;
  double scale = 1;  ///< the example-size ratio the measured bytes were scaled by (1: the profile's own size)
};

/// Elements of one example's input.
double elements(const std::vector<std::int64_t>& shape) {
  double n = 1;
  for (const auto d : shape) n *= static_cast<double>(d);
  return n;
}

/// The profile run's tensor peak less its model state, per example of its micro-batch: what
/// autograd saved for backward plus the transient at the peak (the loss's gradient), both linear in
/// the examples. With activation checkpointing the saved part is the units' checkpointed bytes
/// (units.json) where the profile measured them.
/// An example of another size than the profile's (a sequence of other length, an image of other
/// pixels) scales the activations by the ratio of input elements: linear, as every activation of
/// the built-in models is once attention stores no T x T scores (fused SDPA on a GPU; the CPU's
/// math kernel does store them, so a longer sequence there is underestimated).
MeasuredActivations measured_activations(const Experiment& e, const std::vector<std::int64_t>& sample_shape) {
  const fs::path dir = e.train.memory_profile;
  const Profile p = read_profile(dir, e);
  MeasuredActivations m;
  m.per_example = p.activation_bytes_per_sample;
  m.source = fmt::format("measured by the profile {} on {}", dir.string(), p.device);
  if (!sample_shape.empty() && !p.sample_shape.empty() && p.sample_shape != sample_shape) {
    m.scale = elements(sample_shape) / std::max(1.0, elements(p.sample_shape));
    m.per_example *= m.scale;
    m.source += fmt::format(" at examples of [{}], scaled linearly to [{}] (x{:.3g})", fmt::join(p.sample_shape, ", "),
                            fmt::join(sample_shape, ", "), m.scale);
  } else if (p.sample_shape.empty() && !sample_shape.empty()) {
    m.source += " (it does not record its examples' shape: taken as this experiment's)";
  }
  if (e.train.activation_checkpointing != "full") return m;
  const auto units = load_units(dir, p.device);
  if (!units || units->empty() || units->front().checkpointed_bytes < 0) {
    m.source += " (without activation checkpointing: it saved no per-unit bytes, so this is an upper bound)";
    return m;
  }
  const double per_micro = p.global_batch / std::max(1, p.micro_batches);
  const double excess = m.per_example * per_micro;  // what the peak held beyond the model state, per micro-batch
  double full = 0, kept = 0;
  const auto every = static_cast<std::size_t>(std::max<std::int64_t>(1, e.train.activation_checkpointing_every));
  for (std::size_t i = 0; i < units->size(); ++i) {
    const auto& u = (*units)[i];
    full += m.scale * std::max(0.0, u.activation_bytes);
    kept += m.scale * std::max(0.0, i % every == 0 ? u.checkpointed_bytes : u.activation_bytes);
  }
  const double transient = std::max(0.0, excess - full);
  m.per_example = (kept + transient) / per_micro;
  m.source += ", its units' bytes with activation checkpointing";
  return m;
}

constexpr double kMeasuredUncertainty = 0.05;
constexpr double kScaledUncertainty = 0.10;  // measured at another example size: the scaling adds its own
constexpr double kFormulaUncertainty = 0.25;

}  // namespace

FitOutcome check_strategy_fits(const Experiment& e, const Registry& registry, const WorldInfo& world,
                               const torch::Device& device, double parameters,
                               const std::optional<ModelMemoryEstimate>& memory,
                               const std::optional<HostMemory>& host_available, const std::string& device_name,
                               const std::vector<std::int64_t>& sample_shape) {
  if (e.train.fit_check == "off") return {};
  FitRequest r;
  r.strategy = e.strategy.name;
  r.world_size = std::max(1, world.world_size);
  const RegistryEntry& entry = registry.at(PluginKind::kStrategy, e.strategy.name);
  const Placement& placement = entry.traits.placement;
  if (placement.kind == Placement::Kind::kDevicesInProcess) {  // one process, `devices` replicas
    const auto& values = e.strategy.options.values();
    const auto it = values.find(placement.devices_option);
    if (it != values.end())
      if (const auto* n = std::get_if<std::int64_t>(&it->second); n != nullptr && *n > 0) r.world_size = static_cast<int>(*n);
  }
  r.model = [&e, &registry](const std::string& strategy) { return experiment_strategy_model(e, registry, strategy); };
  if (entry.schema.find("offload") != nullptr) {
    const auto& values = e.strategy.options.values();
    const auto it = values.find("offload");
    const bool on = it != values.end() && to_toml(it->second) == to_toml(OptionValue(std::string("optimizer")));
    if (!on)
      r.offloaded = [&e, &registry] {
        Options options = e.strategy.options;
        options.set("offload", OptionValue(std::string("optimizer")));
        return strategy_model(registry, e.strategy.name, options);
      };
  }
  r.candidates = fit_candidates(registry, r.world_size);
  // Every rank on one host (any world size tried), or hosts of this job's local ranks.
  r.ranks_per_host = world.local_world_size >= r.world_size ? 0 : std::max(1, world.local_world_size);
  r.parameters = parameters;
  std::string activations = "the model's formula";
  double uncertainty = kFormulaUncertainty;
  if (!e.train.memory_profile.empty()) {
    MeasuredActivations measured;
    try {
      measured = measured_activations(e, sample_shape);
    } catch (const Error& err) {
      throw e.error("train.memory_profile", err.what(), err.fix());
    }
    if (memory) r.unit_parameters = memory->unit_parameters;
    r.activation_bytes_per_sample = measured.per_example;  // in the dtype it ran with: this experiment's
    activations = measured.source;
    uncertainty = measured.scale != 1 ? kScaledUncertainty : kMeasuredUncertainty;
  } else if (memory) {
    // Activations in the parameters' dtype: the estimate counts float32 ones.
    const bool narrow = e.precision.param_dtype == "bfloat16" || e.precision.param_dtype == "float16";
    r.unit_parameters = memory->unit_parameters;
    r.activation_bytes_per_sample = memory->activation_bytes_per_sample * (narrow ? 0.5 : 1.0);
    if (e.train.activation_checkpointing == "full")
      r.checkpoint_every = static_cast<int>(std::max<std::int64_t>(1, e.train.activation_checkpointing_every));
  }
  r.global_batch = static_cast<double>(e.train.global_batch_size);
  r.micro_batches = static_cast<int>(e.train.micro_batches);
  r.optimizer = e.optimizer.name;
  r.momentum = e.optimizer.momentum;
  r.param_dtype = e.precision.param_dtype;
  r.reduce_dtype = e.precision.reduce_dtype;
  const int local = std::max(1, world.local_world_size);
  if (!device_name.empty()) {
    const NamedDevice named = require_named_device(device_name);
    r.device_memory = named.bytes;
    r.device_memory_source = fmt::format("--device {} ({})", named.name, named.what);
    if (host_available) r.host_memory = host_available->bytes / local;
  } else if (device.is_cuda()) {
    if (const auto total = device_total_bytes(device)) {
      r.device_memory = static_cast<double>(total->first);
      r.device_memory_source = fmt::format("{} ({})", total->second, device.str());
    } else {
      r.device_memory = 80.0 * 1024 * 1024 * 1024;
      r.device_memory_source = "a GPU (assumed 80 GiB: its memory could not be read)";
    }
    if (host_available) r.host_memory = host_available->bytes / local;
  } else {
    if (!host_available) return {};
    r.device_memory = host_available->bytes / local;
    r.shared_memory = true;
    r.device_memory_source = local > 1 ? fmt::format("{} ({}) shared by this host's {} ranks", host_available->source,
                                                     gib(host_available->bytes), local)
                                       : host_available->source;
  }
  const auto check = check_fit(r);
  FitOutcome out;
  out.line = fit_line(r, check) + fmt::format("; activations {}", activations);
  if (check.fits) return out;
  const std::string override_fix =
      "To run anyway, set [train] fit_check = \"warn\" (--set train.fit_check='\"warn\"').";
  const bool beyond = check.peak > r.device_memory * (1.0 + uncertainty) ||
                      (r.host_memory > 0 && check.estimate.memory.host > r.host_memory * (1.0 + uncertainty));
  const std::string why = fit_refusal(r, check) + fmt::format(" The activations are {} (uncertainty about {:.0f}%).",
                                                              activations, uncertainty * 100);
  if (beyond && e.train.fit_check == "error") throw e.error("strategy.name", why, fit_fix(r, check) + " " + override_fix);
  out.warning = beyond ? fmt::format("{} Running anyway ([train] fit_check = \"warn\"). {}", why, fit_fix(r, check))
                       : fmt::format("{} That is within the estimate's uncertainty: the run may still fit. {}", why,
                                     fit_fix(r, check));
  return out;
}

}  // namespace strata::estimate
