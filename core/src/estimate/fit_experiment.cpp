#include "estimate/fit_experiment.hpp"

#include <algorithm>
#include <variant>

#include <fmt/format.h>

#include "config/experiment.hpp"
#include "estimate/fit.hpp"
#include "text/units.hpp"
#include "train/device_memory.hpp"

namespace strata::estimate {

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

std::string check_strategy_fits(const Experiment& e, const Registry& registry, const WorldInfo& world,
                                const torch::Device& device, double parameters,
                                const std::optional<ModelMemoryEstimate>& memory,
                                const std::optional<HostMemory>& host_available) {
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
  r.candidates = fit_candidates(registry, r.world_size);
  // Every rank on one host (any world size tried), or hosts of this job's local ranks.
  r.ranks_per_host = world.local_world_size >= r.world_size ? 0 : std::max(1, world.local_world_size);
  r.parameters = parameters;
  // Activations in the parameters' dtype: the estimate counts float32 ones.
  const bool narrow = e.precision.param_dtype == "bfloat16" || e.precision.param_dtype == "float16";
  if (memory) {
    r.unit_parameters = memory->unit_parameters;
    r.activation_bytes_per_sample = memory->activation_bytes_per_sample * (narrow ? 0.5 : 1.0);
  }
  if (e.train.activation_checkpointing == "full") r.checkpoint_every = static_cast<int>(std::max<std::int64_t>(1, e.train.activation_checkpointing_every));
  r.global_batch = static_cast<double>(e.train.global_batch_size);
  r.micro_batches = static_cast<int>(e.train.micro_batches);
  r.optimizer = e.optimizer.name;
  r.momentum = e.optimizer.momentum;
  r.param_dtype = e.precision.param_dtype;
  r.reduce_dtype = e.precision.reduce_dtype;
  if (device.is_cuda()) {
    if (const auto total = device_total_bytes(device)) {
      r.device_memory = static_cast<double>(total->first);
      r.device_memory_source = fmt::format("{} ({})", total->second, device.str());
    } else {
      r.device_memory = 80.0 * 1024 * 1024 * 1024;
      r.device_memory_source = "a GPU (assumed 80 GiB: its memory could not be read)";
    }
  } else {
    if (!host_available) return {};
    const int local = std::max(1, world.local_world_size);
    r.device_memory = host_available->bytes / local;
    r.shared_memory = true;
    r.device_memory_source = local > 1 ? fmt::format("{} ({}) shared by this host's {} ranks", host_available->source,
                                                     gib(host_available->bytes), local)
                                       : host_available->source;
  }
  const auto check = check_fit(r);
  if (!check.fits) throw e.error("strategy.name", fit_refusal(r, check), fit_fix(r, check));
  return fit_line(r, check);
}

}  // namespace strata::estimate
