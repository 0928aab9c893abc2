#include "estimate/estimate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sweep/sweep.hpp"
#include "sweep/sweep_check.hpp"
#include "config/experiment.hpp"
#include "estimate/fit_experiment.hpp"
#include "estimate/network.hpp"
#include "estimate/profile.hpp"
#include "estimate/profile_run.hpp"
#include "estimate/strategies.hpp"
#include "io/atomic_file.hpp"
#include "io/run_dir.hpp"
#include "launch/child.hpp"
#include "run.hpp"
#include "train/median.hpp"
#include "strata/errors.hpp"
#include "strata/json.hpp"
#include "strata/registry.hpp"
#include "text/suggest.hpp"

namespace fs = std::filesystem;

namespace strata {

namespace {

using estimate::StrategyEstimate;
using estimate_run::EstimateTarget;
using estimate_run::check_kinds;
using estimate_run::measure_profile;
using estimate_run::profiles_as_itself;
using estimate_run::scale_to_network;

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (std::fabs(b) >= 1024 && i < 4) {
    b /= 1024;
    ++i;
  }
  return i == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.3g} {}", b, units[i]);
}

double host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  return 0;
}

estimate::Network default_network() {
  estimate::Network net;
  net.name = "assumed (no --network)";
  net.gpus_per_node = 0;
  net.intra = {10.0, 10.0};
  net.description = "every rank on one host at 10 GB/s bus bandwidth and 10 us a ring step; give `strata bench comms "
                    "--json FILE` of this machine, or a cluster spec (examples/clusters), for figures that mean something";
  return net;
}



/// A sweep's target: its base, [compare.set] and axes (command-line strategies and world sizes
/// take precedence).
void take_sweep(EstimateTarget& t, const EstimateRequest& r) {
  const Sweep sweep = parse_sweep(r.file, r.overrides);
  t.experiment = sweep.base;
  for (const auto& o : sweep.set) t.overrides.push_back(o.key + "=" + o.toml);
  t.scaling = sweep.scaling;
  t.cpu_threads = sweep.measure.cpu_threads;
  for (const auto& axis : sweep.axes) {
    if (axis.key == "strategy") {
      if (t.strategies.empty())
        for (const auto& v : axis.values) t.strategies.push_back(v.display);
    } else if (axis.key == "world_size") {
      if (t.world_sizes.empty())
        for (const auto& v : axis.values) t.world_sizes.push_back(std::stoi(v.display));
    } else if (axis.values.size() > 1) {
      t.overrides.push_back(axis.key + "=" + axis.values.front().toml);
      t.notes.push_back(fmt::format("the sweep's axis {} is estimated at its first value, {}, only", axis.key,
                                    axis.values.front().display));
    } else if (!axis.values.empty()) {
      t.overrides.push_back(axis.key + "=" + axis.values.front().toml);
    }
  }
  for (const auto& [key, value] : sweep.baseline) {
    if (key == "strategy") t.baseline_strategy = value;
    if (key == "world_size") t.baseline_world = std::stoi(value);
  }
}

EstimateTarget target_of(const EstimateRequest& r) {
  EstimateTarget t;
  t.strategies = r.strategies;
  t.world_sizes = r.world_sizes;
  if (is_sweep_file(r.file)) {
    take_sweep(t, r);
  } else {
    t.experiment = r.file;
    for (const auto& o : r.overrides) {
      if (o.rfind("strategy.", 0) == 0 && o.rfind("strategy.name=", 0) != 0)
        t.strategy_sets.push_back(o.substr(std::string("strategy.").size()));
      else
        t.overrides.push_back(o);
    }
  }
  if (t.world_sizes.empty()) t.world_sizes = {1, 2, 4, 8};
  if (!r.cpu_threads.empty()) t.cpu_threads = r.cpu_threads;
  return t;
}


Json memory_json(const estimate::MemoryEstimate& m) {
  Json j = Json::object();
  j["params"] = m.params;
  j["grads"] = m.grads;
  j["optimizer"] = m.optimizer;
  j["activations"] = m.activations;
  j["gathered"] = m.gathered;
  j["buffers"] = m.buffers;
  j["optimizer_step_transient"] = m.transient_step;
  j["after_backward"] = m.after_backward;
  j["model_state_bytes"] = m.state();
  j["peak_bytes"] = m.peak();
  return j;
}

}  // namespace

Json run_estimate(const EstimateRequest& r) {
  require_single_process("estimate");
  EstimateTarget target = target_of(r);
  Experiment e = load_experiment(target.experiment, target.overrides);
  Registry registry;
  load_registry(registry, &e);
  // --set strategy.KEY=VALUE: the experiment's own strategy takes those of its schema (its profile
  // run too); every estimated strategy those of its own.
  const auto has_key = [&](const std::string& strategy, const std::string& set) {
    const RegistryEntry* entry = registry.find(PluginKind::kStrategy, strategy);
    return entry != nullptr && entry->schema.find(set.substr(0, set.find('='))) != nullptr;
  };
  {
    const std::string own = e.strategy.name;
    std::vector<std::string> overrides = target.overrides;
    for (const auto& set : target.strategy_sets)
      if (has_key(own, set)) overrides.push_back("strategy." + set);
    if (overrides.size() != target.overrides.size()) {
      target.overrides = overrides;
      e = load_experiment(target.experiment, target.overrides);
    }
  }
  // cpu_threads = "equal": every rank, and the profile run, computes with the same intra-op threads
  // at every world size (as `strata compare` runs them), unless the experiment sets its own.
  int equal_threads = 0;
  if (target.cpu_threads == "equal" && e.train.threads == 0 && computes_on_cpu(e)) {
    equal_threads = equal_rank_threads(*std::max_element(target.world_sizes.begin(), target.world_sizes.end()));
    target.overrides.push_back(fmt::format("train.threads={}", equal_threads));
    e = load_experiment(target.experiment, target.overrides);
  }
  validate_plugin_sections(e, registry);

  std::vector<std::string> strategies = target.strategies;
  if (strategies.empty()) {
    // Every strategy that declares a schedule: those on one device, in one process, then a rank per device.
    for (const auto kind : {Placement::Kind::kOneDevice, Placement::Kind::kDevicesInProcess, Placement::Kind::kRankPerDevice})
      for (const auto* entry : registry.entries())
        if (entry->kind == PluginKind::kStrategy && entry->scheduler && entry->traits.placement.kind == kind)
          strategies.push_back(entry->name);
  }
  for (const auto* entry : registry.entries())
    if (entry->kind == PluginKind::kStrategy && entry->traits.placement.kind == Placement::Kind::kOneDevice)
      target.one_device = entry->name;
  if (target.one_device.empty())
    throw PluginError({}, "no strategy that runs on one device is registered: `strata estimate` has no profile run.",
                      "Keep the built-in strategy plugins on the plugin search path.");
  if (target.baseline_strategy.empty()) target.baseline_strategy = target.one_device;
  for (const auto& set : target.strategy_sets) {
    const bool anyone = has_key(e.strategy.name, set) ||
                        std::any_of(strategies.begin(), strategies.end(), [&](const auto& s) { return has_key(s, set); });
    if (!anyone)
      throw UsageError(fmt::format("--set strategy.{}: no strategy estimated here has the option '{}'.", set,
                                   set.substr(0, set.find('='))),
                       "Name an option of an estimated strategy (`strata describe NAME` lists them), or add the "
                       "strategy that has it to --strategies.");
  }
  const auto known = registry.names(PluginKind::kStrategy);
  for (const auto& s : strategies)
    if (registry.find(PluginKind::kStrategy, s) == nullptr) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
      throw UsageError(fmt::format("--strategies: unknown strategy '{}'.{} Known: {}.", s,
                                   detail::did_you_mean(s, known), names),
                       "Name registered strategies (`strata plugins` lists them), e.g. `--strategies NAME,NAME`.");
    }

  const estimate::Network network = r.network.empty() ? default_network() : estimate::load_network(r.network);
  // The kinds of device are checked before any profile run: --profile's, or where this host runs it.
  check_kinds(!r.profile.empty() ? estimate::read_profile(r.profile, e).device : computes_on_cpu(e) ? "cpu" : "cuda",
              network, r.compute_scale);
  if (network.gpus_per_node <= 0 && !network.measured.empty()) {
    // Measured tables: say which world sizes read a table measured at another.
    std::vector<int> off;
    for (int n : target.world_sizes)
      if (n > 1 && !network.measured.count(n)) off.push_back(n);
    if (!off.empty())
      target.notes.push_back(fmt::format("no `bench comms` table measured at {} ranks: the nearest world size's is used",
                                         fmt::join(off, ", ")));
  }

  fs::path out = r.out;
  if (out.empty()) out = fs::path(e.experiment.out_dir) / e.experiment.name / ("estimate-" + utc_time("%Y%m%dT%H%M%SZ"));
  fs::create_directories(out);

  estimate::Profile profile = measure_profile(target, r, e, profiles_as_itself(registry, e), network, out);
  scale_to_network(profile, network, r.compute_scale);
  if (equal_threads > 0 && profile.device == "cpu")
    profile.notes.push_back(fmt::format("every rank computes with {} intra-op thread{} at every world size (cpu_threads "
                                        "\"equal\"; this host has {}), as each GPU brings its own compute; "
                                        "--cpu-threads share divides the host's among the ranks instead",
                                        equal_threads, equal_threads == 1 ? "" : "s", host_threads()));

  double device_memory = r.device_memory_gib * 1024.0 * 1024.0 * 1024.0;
  std::string memory_source = "--device-memory";
  if (device_memory <= 0) {
    if (profile.device == "cpu") {
      device_memory = host_memory_bytes();
      memory_source = "host memory (CPU ranks share it: divided by the world size)";
    } else {
      device_memory = 80.0 * 1024 * 1024 * 1024;
      memory_source = "assumed 80 GiB per GPU (give --device-memory)";
    }
  }
  const bool shared_host = profile.device == "cpu" && r.device_memory_gib <= 0;

  const bool weak = target.scaling == "weak";
  auto input = [&](int n) {
    estimate::EstimateInput in;
    in.profile = &profile;
    in.network = &network;
    in.world_size = n;
    in.batch_scale = weak ? static_cast<double>(n) / target.baseline_world : 1.0;
    return in;
  };
  // A strategy's schedule with the experiment's options (its own) or its defaults, and the --set
  // strategy options of its schema.
  std::map<std::string, estimate::StrategyModel> models;
  for (const auto& s : strategies) {
    if (s == e.strategy.name) {
      models[s] = estimate::experiment_strategy_model(e, registry, s);
      continue;
    }
    std::vector<std::string> sets;
    for (const auto& set : target.strategy_sets)
      if (has_key(s, set)) sets.push_back(set);
    models[s] = estimate::strategy_model(registry, s, strategy_options_from(e, registry.at(PluginKind::kStrategy, s), sets));
  }
  if (!models.count(target.baseline_strategy))
    models[target.baseline_strategy] = estimate::experiment_strategy_model(e, registry, target.baseline_strategy);
  auto predict = [&](const std::string& s, int n) { return estimate::estimate_strategy(s, input(n), models.at(s)); };
  std::vector<StrategyEstimate> rows;
  for (const auto& s : strategies) {
    for (int n : target.world_sizes) {
      const auto in = input(n);
      rows.push_back(predict(s, n));
      // `strata run` refuses a global batch that the ranks' micro-batches do not divide.
      const double batch = profile.global_batch * in.batch_scale;
      const double parts = static_cast<double>(n) * std::max(1, profile.micro_batches);
      if (rows.back().applicable && std::fmod(batch, parts) != 0) {
        rows.back().applicable = false;
        rows.back().note = fmt::format("global batch {:g} is not divisible by {} ranks x {} micro-batches", batch, n,
                                       std::max(1, profile.micro_batches));
      }
    }
  }
  // The baseline (the sweep's, else the one-device strategy at world size 1), predicted like the rest. Strong
  // scaling: speedup = its step time / the step time; weak: the ratio of throughputs.
  auto speedup_of = [&](const StrategyEstimate& row, double base) {
    return weak ? base / row.step_s * row.world_size / target.baseline_world : base / row.step_s;
  };
  auto efficiency_of = [&](double speedup, int world) { return speedup * target.baseline_world / world; };
  double baseline = 0;
  for (const auto& row : rows)
    if (row.strategy == target.baseline_strategy && row.world_size == target.baseline_world) baseline = row.step_s;
  if (baseline <= 0)
    baseline = predict(target.baseline_strategy, target.baseline_world).step_s;
  auto fits = [&](const StrategyEstimate& row) {
    const double limit = shared_host ? device_memory / row.world_size : device_memory;
    return row.memory.peak() <= limit;
  };

  // ---- the table ----
  std::cout << fmt::format("estimate of {} from the profile {} ({} on {}, {} parameters, batch {})\n", e.experiment.name,
                           profile.source, profile.device, profile.device_name, profile.parameters, profile.global_batch);
  std::cout << fmt::format("network: {}: {}\n", network.name, network.description);
  std::cout << fmt::format("device memory: {} ({})\n", bytes_text(device_memory), memory_source);
  std::cout << fmt::format("PREDICTED, not measured. Baseline: {} at world size {}; {}, efficiency = speedup / (N / {}).\n",
                           target.baseline_strategy, target.baseline_world,
                           weak ? "weak scaling (the batch per rank fixed): speedup = throughput / its throughput"
                                : "strong scaling: speedup = its step time / the step time",
                           target.baseline_world);
  for (const auto& note : target.notes) std::cout << "note: " << note << "\n";
  const double noise = std::max(profile.step_spread, profile.reference_spread);
  std::cout << fmt::format("ms @N: the predicted step time (and its interval: +-{:.0f}%, the estimator's own error of "
                           "{:.0f}% with {})\n",
                           100 * estimate::prediction_uncertainty(profile), 100 * estimate::kModelError,
                           noise > 0 ? fmt::format("the profile's noise of {:.0f}%", 100 * noise)
                                     : std::string("no noise the profile records"));
  std::cout << "\n";
  std::string header = "| strategy |";
  std::string rule = "|:---------|";
  for (int n : target.world_sizes) {
    header += fmt::format(" ms @{0} | speedup @{0} | eff. @{0} | mem/rank @{0} | bus/step @{0} | fits @{0} |", n);
    rule += "------:|------:|------:|------:|------:|:----|";
  }
  std::cout << header << "\n" << rule << "\n";
  std::vector<std::string> marks;
  for (const auto& s : strategies) {
    std::string line = "| " + s + " |";
    for (const auto& row : rows) {
      if (row.strategy != s) continue;
      if (!row.applicable) {
        line += " n/a | n/a | n/a | n/a | n/a | n/a |";
        continue;
      }
      const double speedup = speedup_of(row, baseline);
      line += fmt::format(" {:.3g}{} ({:.3g}–{:.3g}) | {:.2f} | {:.0f}% | {} | {} | {} |", row.step_s * 1e3,
                          row.coarse ? "~" : "", row.step_low_s * 1e3, row.step_high_s * 1e3, speedup,
                          100 * efficiency_of(speedup, row.world_size), bytes_text(row.memory.peak()), bytes_text(row.bus_bytes),
                          fits(row) ? "yes" : "NO");
    }
    std::cout << line << "\n";
  }
  std::cout << "\n";
  for (const auto& row : rows)
    if (row.coarse && row.world_size == target.world_sizes.front())
      std::cout << fmt::format("~ {}: coarse ({})\n", row.strategy, row.note);
  for (const auto& row : rows)
    if (!row.applicable && row.strategy != target.baseline_strategy)
      std::cout << fmt::format("n/a {} at {}: {}\n", row.strategy, row.world_size, row.note);
  for (const auto& note : profile.notes) std::cout << "note: " << note << "\n";
  // An efficiency above 100% is never printed without its cause.
  for (const auto& row : rows) {
    if (!row.applicable || row.world_size == target.baseline_world) continue;
    const double efficiency = efficiency_of(speedup_of(row, baseline), row.world_size);
    if (efficiency <= 1.005) continue;
    std::string why;
    if (profile.device == "cpu") {
      const int threads = estimate::rank_threads(profile, network, row.world_size);
      const int base_threads = estimate::rank_threads(profile, network, target.baseline_world);
      const int all = threads * row.world_size, base_all = base_threads * target.baseline_world;
      if (all > base_all)
        why = fmt::format("its {} ranks compute with {} threads in all, the baseline with {}: more of the host's cores "
                          "work, which a GPU job does not gain (set [train] threads to compare at equal threads per rank)",
                          row.world_size, all, base_all);
      else
        why = fmt::format("its ranks compute with {} thread{} each, the baseline with {}, and the profile measured "
                          "fewer threads to work more efficiently per thread",
                          threads, threads == 1 ? "" : "s", base_threads);
    } else {
      why = "the baseline's step holds work that does not shrink with its own world size but is split here (its "
            "micro-batches or its data loading)";
    }
    std::cout << fmt::format("efficiency above 100%: {} at {} ({:.0f}%): {}\n", row.strategy, row.world_size,
                             100 * efficiency, why);
  }

  // ---- estimate.json and estimate.csv ----
  Json j = Json::object();
  j["experiment"] = e.experiment.name;
  j["file"] = r.file.string();
  j["predicted"] = true;
  j["scaling"] = target.scaling;
  j["baseline"] = fmt::format("{}@{}", target.baseline_strategy, target.baseline_world);
  Json pj = Json::object();
  pj["run_dir"] = profile.source;
  pj["device"] = profile.device;
  pj["parameters"] = profile.parameters;
  pj["global_batch_size"] = profile.global_batch;
  pj["micro_batches"] = profile.micro_batches;
  pj["step_time_s"] = profile.step_s;
  pj["compute_s"] = profile.compute_s;
  pj["optimizer_s"] = profile.optimizer_s;
  pj["data_s"] = profile.data_s;
  pj["other_s"] = profile.other_s;
  pj["activation_bytes_per_sample"] = profile.activation_bytes_per_sample;
  pj["per_unit_times"] = profile.per_unit_times;
  pj["units"] = estimate::units_json(profile.units);
  Json notes = Json::array();
  for (const auto& n : profile.notes) notes.push_back(n);
  pj["notes"] = std::move(notes);
  j["profile"] = std::move(pj);
  Json nj = Json::object();
  nj["name"] = network.name;
  nj["description"] = network.description;
  nj["gpus_per_node"] = network.gpus_per_node;
  j["network"] = std::move(nj);
  j["device_memory_bytes"] = device_memory;
  j["device_memory_source"] = memory_source;
  j["baseline_step_time_s"] = baseline;
  Json list = Json::array();
  std::string csv =
      "strategy,world_size,applicable,coarse,step_time_s,step_time_low_s,step_time_high_s,speedup,efficiency,compute_s,"
      "exposed_comm_s,comm_s,"
      "params_bytes,grads_bytes,optimizer_bytes,activation_bytes,gathered_bytes,buffer_bytes,model_state_bytes,peak_bytes,"
      "bus_bytes_per_step,payload_bytes_per_step,collectives_per_step,fits,note\n";
  for (const auto& row : rows) {
    const double speedup = row.applicable ? speedup_of(row, baseline) : 0.0;
    const double efficiency = efficiency_of(speedup, row.world_size);
    Json o = Json::object();
    o["strategy"] = row.strategy;
    o["world_size"] = row.world_size;
    o["applicable"] = row.applicable;
    o["coarse"] = row.coarse;
    o["note"] = row.note;
    o["step_time_s"] = row.step_s;
    Json interval = Json::array();
    interval.push_back(row.step_low_s);
    interval.push_back(row.step_high_s);
    o["step_time_interval_s"] = std::move(interval);
    o["speedup"] = speedup;
    o["efficiency"] = efficiency;
    o["compute_s"] = row.compute_s;
    o["exposed_comm_s"] = row.exposed_comm_s;
    o["comm_s"] = row.comm_s;
    o["memory"] = memory_json(row.memory);
    if (row.process_peak > 0) o["memory"]["process_peak_bytes"] = row.process_peak;
    o["bus_bytes_per_step"] = row.bus_bytes;
    o["payload_bytes_per_step"] = row.payload_bytes;
    o["collectives_per_step"] = row.collectives;
    o["fits"] = row.applicable && fits(row);
    list.push_back(std::move(o));
    std::string note = row.note;
    std::replace(note.begin(), note.end(), ',', ';');
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", row.strategy,
                       row.world_size, row.applicable, row.coarse, row.step_s, row.step_low_s, row.step_high_s, speedup,
                       efficiency, row.compute_s,
                       row.exposed_comm_s, row.comm_s, row.memory.params, row.memory.grads, row.memory.optimizer,
                       row.memory.activations, row.memory.gathered, row.memory.buffers, row.memory.state(),
                       row.memory.peak(), row.bus_bytes, row.payload_bytes, row.collectives, row.applicable && fits(row), note);
  }
  j["rows"] = std::move(list);
  write_file_atomically(out / "estimate.json", j.dump() + "\n");
  write_file_atomically(out / "estimate.csv", csv);
  std::cout << fmt::format("\nwritten: {} and {}\n", (out / "estimate.json").string(), (out / "estimate.csv").string());
  return j;
}

int estimate_experiment(const EstimateRequest& request) {
  run_estimate(request);
  return 0;
}

}  // namespace strata
