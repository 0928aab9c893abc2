#include "estimate/estimate.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>

#include <fmt/format.h>

#include "config/experiment.hpp"
#include "estimate/fit_experiment.hpp"
#include "estimate/network.hpp"
#include "estimate/profile.hpp"
#include "estimate/strategies.hpp"
#include "io/atomic_file.hpp"
#include "io/run_dir.hpp"
#include "launch/child.hpp"
#include "run.hpp"
#include "strata/errors.hpp"
#include "strata/json.hpp"
#include "strata/registry.hpp"
#include "text/suggest.hpp"

namespace fs = std::filesystem;

namespace strata {

namespace {

using estimate::StrategyEstimate;

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


/// The profile run: the experiment on one device for a few steps. Its own strategy at world size 1
/// (every built-in one but dp is `single` there, with its options valid), else `single`.
fs::path run_profile(const EstimateRequest& r, const Experiment& e, const fs::path& out) {
  const fs::path dir = out / "profile";
  std::vector<std::string> args{"run", r.file.string(), "--out", dir.string()};
  for (const auto& o : r.overrides) args.insert(args.end(), {"--set", o});
  const std::string own = e.strategy.name;
  const bool own_ok = own == "single" || own == "ddp" || own == "zero1" || own == "zero2" || own == "zero3" || own == "fsdp";
  if (!own_ok) args.insert(args.end(), {"--set", "strategy.name=\"single\""});
  const auto steps = std::min<std::int64_t>(e.train.steps, r.profile_steps);
  args.insert(args.end(), {"--set", "distributed.nproc=1", "--set", fmt::format("train.steps={}", steps), "--set",
                           "eval.every=0", "--set", fmt::format("train.timing_warmup_steps={}", std::max<std::int64_t>(1, steps / 4))});
  std::cout << fmt::format("profile: {} steps of {} on one device ({})", steps, own_ok ? own : "single", dir.string()) << std::endl;
  const LoggedChild child = run_logged(args, dir);
  if (child.outcome.exit_code != 0) {
    std::string cause;  // the run's own error line, if it printed one
    for (const auto& line : child.lines)
      if (line.rfind("error: ", 0) == 0) cause = " " + line;
    throw Error(fmt::format("the profile run failed (exit {}; its output is in {}).{}", child.outcome.exit_code,
                            (dir / "output.log").string(), cause),
                "Make `strata run` of the experiment work at world size 1, or pass --profile RUN_DIR of one that did.");
  }
  return dir;
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
  j["model_state_bytes"] = m.state();
  j["peak_bytes"] = m.peak();
  return j;
}

}  // namespace

int estimate_experiment(const EstimateRequest& r) {
  require_single_process("estimate");
  if (r.world_sizes.empty()) throw UsageError("--world-sizes is empty.", "Write `--world-sizes 1,2,4,8`.");
  Experiment e = load_experiment(r.file, r.overrides);
  Registry registry;
  load_registry(registry, &e);
  validate_plugin_sections(e, registry);

  std::vector<std::string> strategies = r.strategies;
  if (strategies.empty()) strategies = estimate::built_in_strategies();
  const auto known = registry.names(PluginKind::kStrategy);
  for (const auto& s : strategies)
    if (registry.find(PluginKind::kStrategy, s) == nullptr) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
      throw UsageError(fmt::format("--strategies: unknown strategy '{}'.{} Known: {}.", s,
                                   detail::did_you_mean(s, known), names),
                       "Name registered strategies (`strata plugins` lists them), e.g. `--strategies ddp,zero3`.");
    }

  const estimate::Network network = r.network.empty() ? default_network() : estimate::load_network(r.network);

  fs::path out = r.out;
  if (out.empty()) out = fs::path(e.experiment.out_dir) / e.experiment.name / ("estimate-" + utc_time("%Y%m%dT%H%M%SZ"));
  fs::create_directories(out);

  const fs::path profile_dir = r.profile.empty() ? run_profile(r, e, out) : r.profile;
  std::vector<estimate::UnitProfile> units;
  std::string units_error;
  try {
    units = estimate::model_units(e);
  } catch (const std::exception& ex) {
    units_error = ex.what();
  }
  estimate::Profile profile = estimate::read_profile(profile_dir, e, units);
  if (!units_error.empty()) profile.notes.push_back("the model could not be built here (" + units_error + ")");

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

  std::vector<StrategyEstimate> rows;
  for (const auto& s : strategies) {
    const auto footprint = estimate::declared_footprint(registry, s);
    for (int n : r.world_sizes) {
      estimate::EstimateInput in;
      in.profile = &profile;
      in.network = &network;
      in.world_size = n;
      if (s == e.strategy.name) in.options = estimate::strategy_options(e);
      rows.push_back(estimate::estimate_strategy(s, in, footprint));
    }
  }
  // Baseline: single at world size 1 (predicted).
  double baseline = 0;
  for (const auto& row : rows)
    if (row.strategy == "single" && row.world_size == 1) baseline = row.step_s;
  if (baseline <= 0) {
    estimate::EstimateInput in;
    in.profile = &profile;
    in.network = &network;
    in.world_size = 1;
    baseline = estimate::estimate_strategy("single", in).step_s;
  }
  auto fits = [&](const StrategyEstimate& row) {
    const double limit = shared_host ? device_memory / row.world_size : device_memory;
    return row.memory.peak() <= limit;
  };

  // ---- the table ----
  std::cout << fmt::format("estimate of {} from the profile {} ({} on {}, {} parameters, batch {})\n", e.experiment.name,
                           profile.source, profile.device, profile.device_name, profile.parameters, profile.global_batch);
  std::cout << fmt::format("network: {}: {}\n", network.name, network.description);
  std::cout << fmt::format("device memory: {} ({})\n", bytes_text(device_memory), memory_source);
  std::cout << "PREDICTED, not measured. Baseline: single at world size 1; speedup = its step time / the step time "
               "(strong scaling), efficiency = speedup / N.\n\n";
  std::string header = "| strategy |";
  std::string rule = "|:---------|";
  for (int n : r.world_sizes) {
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
      const double speedup = baseline / row.step_s;
      line += fmt::format(" {:.3g}{} | {:.2f} | {:.0f}% | {} | {} | {} |", row.step_s * 1e3, row.coarse ? "~" : "", speedup,
                          100 * speedup / row.world_size, bytes_text(row.memory.peak()), bytes_text(row.bus_bytes),
                          fits(row) ? "yes" : "NO");
    }
    std::cout << line << "\n";
  }
  std::cout << "\n";
  for (const auto& row : rows)
    if (row.coarse && row.world_size == r.world_sizes.front())
      std::cout << fmt::format("~ {}: coarse ({})\n", row.strategy, row.note);
  for (const auto& note : profile.notes) std::cout << "note: " << note << "\n";

  // ---- estimate.json and estimate.csv ----
  Json j = Json::object();
  j["experiment"] = e.experiment.name;
  j["file"] = r.file.string();
  j["predicted"] = true;
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
  Json unit_list = Json::array();
  for (const auto& u : profile.units) {
    Json uj = Json::object();
    uj["name"] = u.name;
    uj["params"] = u.params;
    unit_list.push_back(std::move(uj));
  }
  pj["units"] = std::move(unit_list);
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
      "strategy,world_size,applicable,coarse,step_time_s,speedup,efficiency,compute_s,exposed_comm_s,comm_s,"
      "params_bytes,grads_bytes,optimizer_bytes,activation_bytes,gathered_bytes,buffer_bytes,model_state_bytes,peak_bytes,"
      "bus_bytes_per_step,payload_bytes_per_step,collectives_per_step,fits,note\n";
  for (const auto& row : rows) {
    const double speedup = row.applicable ? baseline / row.step_s : 0.0;
    Json o = Json::object();
    o["strategy"] = row.strategy;
    o["world_size"] = row.world_size;
    o["applicable"] = row.applicable;
    o["coarse"] = row.coarse;
    o["note"] = row.note;
    o["step_time_s"] = row.step_s;
    o["speedup"] = speedup;
    o["efficiency"] = speedup / row.world_size;
    o["compute_s"] = row.compute_s;
    o["exposed_comm_s"] = row.exposed_comm_s;
    o["comm_s"] = row.comm_s;
    o["memory"] = memory_json(row.memory);
    o["bus_bytes_per_step"] = row.bus_bytes;
    o["payload_bytes_per_step"] = row.payload_bytes;
    o["collectives_per_step"] = row.collectives;
    o["fits"] = row.applicable && fits(row);
    list.push_back(std::move(o));
    std::string note = row.note;
    std::replace(note.begin(), note.end(), ',', ';');
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", row.strategy, row.world_size,
                       row.applicable, row.coarse, row.step_s, speedup, speedup / row.world_size, row.compute_s,
                       row.exposed_comm_s, row.comm_s, row.memory.params, row.memory.grads, row.memory.optimizer,
                       row.memory.activations, row.memory.gathered, row.memory.buffers, row.memory.state(),
                       row.memory.peak(), row.bus_bytes, row.payload_bytes, row.collectives, row.applicable && fits(row), note);
  }
  j["rows"] = std::move(list);
  write_file_atomically(out / "estimate.json", j.dump() + "\n");
  write_file_atomically(out / "estimate.csv", csv);
  std::cout << fmt::format("\nwritten: {} and {}\n", (out / "estimate.json").string(), (out / "estimate.csv").string());
  return 0;
}

}  // namespace strata
