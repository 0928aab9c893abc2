// Validating every run of a sweep before any starts: a typo in the last combination must not
// surface an hour into the comparison, and `strata validate SWEEP` finds it without running.
#include "sweep/sweep_check.hpp"

#include <algorithm>
#include <iostream>
#include <thread>

#include <torch/cuda.h>

#include <fmt/format.h>

#include "config/experiment.hpp"
#include "run.hpp"
#include "strata/registry.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

/// "ddp-w5 (strategy ddp, world_size 5)": a run and its combination.
std::string run_name(const SweepRun& run) {
  std::string values;
  for (const auto& [key, display] : run.values) values += (values.empty() ? "" : ", ") + key + " " + display;
  return values.empty() ? run.label : run.label + " (" + values + ")";
}

/// Whether `run` with its overrides but the one at `skip` fails as `error` did.
bool fails_alike(const Sweep& sweep, const SweepRun& run, std::size_t skip, const ConfigError& error) {
  std::vector<std::string> overrides;
  std::vector<SourceLocation> origins;
  for (std::size_t i = 0; i < run.overrides.size(); ++i)
    if (i != skip) {
      overrides.push_back(run.overrides[i]);
      origins.push_back(i < run.origins.size() ? run.origins[i] : SourceLocation{});
    }
  try {
    check_experiment(load_experiment(sweep.base, overrides, origins));
  } catch (const ConfigError& e) {
    return std::string(e.what()) == error.what();
  } catch (const std::exception&) {
    return false;
  }
  return false;
}

/// Whether `where` is an entry of the sweep: a position in the sweep file, or a `--set`.
bool sweep_entry(const Sweep& sweep, const SourceLocation& where) {
  return where.file == sweep.file.string() || where.file.rfind("--set ", 0) == 0;
}

/// Validates one run of the sweep. Its errors name the run and its combination, at the sweep entry
/// that causes them: an error the base experiment's position would blame (a cross-field check that
/// an axis value broke, such as a global batch that world size 5 does not divide) moves to the last
/// of the run's sweep entries without which it goes away.
std::int64_t validate_run(const Sweep& sweep, const SweepRun& run) {
  try {
    const Experiment e = load_experiment(sweep.base, run.overrides, run.origins);
    check_experiment(e);
    return e.train.steps;
  } catch (const ConfigError& e) {
    SourceLocation where = e.where();
    std::string seen_at;
    if (!sweep_entry(sweep, where)) {
      for (std::size_t i = run.overrides.size(); i-- > 0;) {
        if (i >= run.origins.size() || !sweep_entry(sweep, run.origins[i])) continue;
        if (fails_alike(sweep, run, i, e)) continue;
        where = run.origins[i];
        seen_at = fmt::format(" ({} at {})", e.key().empty() ? std::string("checked") : e.key(), e.where().str());
        break;
      }
    }
    std::string message = e.what();
    if (!seen_at.empty() && !message.empty() && message.back() == '.') message.pop_back(), seen_at += ".";
    throw ConfigError(where, e.key(), fmt::format("run {}: {}{}", run_name(run), message, seen_at), e.fix());
  }
}

/// [compare] cpu_threads = "equal": every rank of every CPU run computes with the same intra-op
/// threads, the host's hardware threads over the largest world size, unless the experiment (or an
/// axis) sets [train] threads or the device.
void give_equal_threads(const Sweep& sweep, const Experiment& base, SweepPlan& plan) {
  if (sweep.measure.cpu_threads != "equal" || base.train.threads > 0 || !computes_on_cpu(base)) return;
  for (const auto& axis : sweep.axes)
    if (axis.key == "train.threads" || axis.key == "train.device") return;
  int widest = 1;
  for (const auto& run : plan.combinations) widest = std::max(widest, run.world_size);
  plan.host_threads = host_threads();
  plan.rank_threads = equal_rank_threads(widest);
  for (auto* runs : {&plan.combinations, &plan.runs})
    for (auto& run : *runs) {
      run.overrides.push_back("train.threads=" + std::to_string(plan.rank_threads));
      run.origins.push_back(sweep.base_at);
    }
}

}  // namespace

bool computes_on_cpu(const Experiment& e) {
  return e.train.device == "cpu" || (e.train.device == "auto" && !torch::cuda::is_available());
}

int host_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

int equal_rank_threads(int widest_world) { return std::max(1, host_threads() / std::max(1, widest_world)); }

CheckedSweep check_sweep(const fs::path& file, const std::vector<std::string>& overrides,
                         const std::function<void(const SweepRun&)>& on_valid) {
  CheckedSweep checked{parse_sweep(file, overrides), {}};
  const Sweep& sweep = checked.sweep;
  std::vector<std::string> set_texts;
  std::vector<SourceLocation> set_origins;
  for (const auto& o : sweep.set) {
    set_texts.push_back(o.key + "=" + o.toml);
    set_origins.push_back(o.where);
  }
  const Experiment base = load_experiment(sweep.base, set_texts, set_origins);
  Registry registry;
  load_registry(registry, &base);
  checked.plan = plan_sweep(sweep, registry, base.strategy.name, static_cast<int>(base.distributed.nproc),
                            base.train.global_batch_size);
  give_equal_threads(sweep, base, checked.plan);
  for (auto& run : checked.plan.combinations) {
    run.steps = validate_run(sweep, run);
    if (on_valid) on_valid(run);
  }
  for (auto& run : checked.plan.runs) run.steps = checked.plan.combinations[run.combination].steps;
  return checked;
}

void validate_sweep(const fs::path& file, const std::vector<std::string>& overrides) {
  std::size_t combinations = 0;
  const auto checked = check_sweep(file, overrides, [&](const SweepRun& run) {
    ++combinations;
    std::cout << "  ok: " << run_name(run) << "\n";
  });
  const auto& [sweep, plan] = checked;
  for (const auto& s : plan.skipped) std::cout << "  not run: " << s << "\n";
  const std::string more =
      sweep.auto_repeat() ? fmt::format(", up to {} rounds in the auto-repeat mode", sweep.max_rounds()) : std::string();
  std::cout << fmt::format("{}: ok ({} combination{} valid, {} run{} with {} repeat{}{}; {} scaling, base {}); nothing was run\n",
                           file.string(), combinations, combinations == 1 ? "" : "s", plan.runs.size(),
                           plan.runs.size() == 1 ? "" : "s", sweep.repeats, sweep.repeats == 1 ? "" : "s", more,
                           sweep.scaling, sweep.base.string());
}

}  // namespace strata
