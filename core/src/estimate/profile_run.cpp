// The profile an estimate stands on (estimate/profile_run.hpp).

#include "estimate/profile_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "estimate/profile.hpp"
#include "io/atomic_file.hpp"
#include "io/run_dir.hpp"
#include "launch/child.hpp"
#include "run.hpp"
#include "strata/errors.hpp"
#include "train/median.hpp"

namespace fs = std::filesystem;

namespace strata::estimate_run {

namespace {

/// A strategy profiled as the one-device strategy leaves its [strategy] options out of the profile
/// run: those given with --set are simply not passed on; those in the experiment file cannot be
/// left out. Returns the first such key ("strategy.KEY"), or "" when nothing is in the way.
std::string profile_blocked(const Experiment& e, bool own_ok) {
  if (own_ok) return {};
  for (const auto& [key, value] : e.strategy.options.values())
    if (e.in_file("strategy." + key)) return "strategy." + key;
  return {};
}

/// The profile run: the experiment on one device for a few steps. Its own strategy at world size 1
/// where it profiles as itself, else the one-device strategy (without the strategy's --set options).
/// `threads` > 0: computing with that many threads (the ranks' count at some world size on the CPU),
/// into out/profile-threads-N.
fs::path run_profile(const EstimateTarget& t, const EstimateRequest& r, const Experiment& e, bool own_ok,
                     const fs::path& out, int threads = 0) {
  const fs::path dir = out / (threads > 0 ? fmt::format("profile-threads-{}", threads) : std::string("profile"));
  std::vector<std::string> args{"run", t.experiment.string(), "--out", dir.string()};
  const std::string own = e.strategy.name;
  if (const std::string blocked = profile_blocked(e, own_ok); !blocked.empty())
    throw e.error(blocked,
                  fmt::format("the profile run of '{}' is `{}` on one device, which does not take its [strategy] "
                              "options, and this one is in the experiment file, where it cannot be left out.",
                              own, t.one_device),
                  "Give the strategy's options with --set strategy.KEY=VALUE instead (they reach the estimate, not the "
                  "profile run), or pass --profile RUN_DIR of a one-device run of this experiment.");
  for (const auto& o : t.overrides)
    if (own_ok || o.rfind("strategy.", 0) != 0) args.insert(args.end(), {"--set", o});
  if (threads > 0) args.insert(args.end(), {"--set", fmt::format("train.threads={}", threads)});
  if (!own_ok) args.insert(args.end(), {"--set", fmt::format("strategy.name=\"{}\"", t.one_device)});
  const auto steps = std::min<std::int64_t>(e.train.steps, r.profile_steps);
  args.insert(args.end(), {"--set", "distributed.nproc=1", "--set", fmt::format("train.steps={}", steps), "--set",
                           "eval.every=0", "--set", fmt::format("train.timing_warmup_steps={}", std::max<std::int64_t>(1, steps / 4))});
  std::cout << fmt::format("profile: {} steps of {} on one device{} ({})", steps, own_ok ? own : t.one_device,
                           threads > 0 ? fmt::format(" with {} thread{}", threads, threads == 1 ? "" : "s") : "", dir.string())
            << std::endl;
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

/// The reference runs (the profile's own thread count, before and after the runs at other counts)
/// must agree: a majority of them within this relative spread of one another, or within
/// kReferenceFloorS of work per step (a step of a fraction of a millisecond varies by more than
/// its size with the scheduler's moods alone). While they do not, more are run, up to
/// kMaxReferences; the reference is that majority's median.
constexpr double kReferenceBand = 0.2;
constexpr double kReferenceFloorS = 1e-3;
constexpr std::size_t kMaxReferences = 4;

/// (largest - smallest) / smallest.
double spread(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *lo > 0 ? (*hi - *lo) / *lo : 0.0;
}

/// The largest set of `v` within kReferenceBand (or kReferenceFloorS) of its smallest member, when it is a majority of
/// `v` (more than half, at least two); else empty.
std::vector<double> agreeing(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::vector<double> best;
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::size_t j = i;
    while (j < v.size() && (v[j] <= v[i] * (1.0 + kReferenceBand) || v[j] - v[i] <= kReferenceFloorS)) ++j;
    if (j - i > best.size()) best.assign(v.begin() + static_cast<std::ptrdiff_t>(i), v.begin() + static_cast<std::ptrdiff_t>(j));
  }
  return best.size() >= 2 && 2 * best.size() > v.size() ? best : std::vector<double>{};
}

/// Reference run `k` (0: before the others). Test hook: STRATA_FAULT=diverging-references:SECONDS
/// makes reference k compute k x SECONDS longer per micro-batch (STRATA_FAULT=slow-compute in its
/// environment), as on a host whose load grows while it is measured.
template <class Work>
double reference_run(Work& work, int threads, const std::string& dir, std::size_t k) {
  const char* fault = std::getenv("STRATA_FAULT");
  double seconds = 0;
  if (k == 0 || fault == nullptr || std::sscanf(fault, "diverging-references:%lf", &seconds) != 1 || seconds <= 0)
    return work(threads, dir);
  const std::string saved = fault;
  ::setenv("STRATA_FAULT", fmt::format("slow-compute:{}", seconds * static_cast<double>(k)).c_str(), 1);
  const double w = work(threads, dir);
  ::setenv("STRATA_FAULT", saved.c_str(), 1);
  return w;
}

Error contradictory_references(const std::vector<double>& references, int threads, const fs::path& out) {
  std::vector<std::string> ms;
  for (double r : references) ms.push_back(fmt::format("{:.3g}", 1e3 * r));
  return Error(fmt::format("the profile's reference runs contradict each other: the same short run at {} thread{} took "
                           "{} ms of work per step (a spread of {:.0f}%; no majority of them within {:.0f}% or {:g} ms of "
                           "one another, as runs of one moment are), so no ratio between thread counts, and no prediction from them, can be "
                           "trusted. Their runs are in {}.",
                           threads, threads == 1 ? "" : "s", fmt::join(ms, ", "), 100 * spread(references),
                           100 * kReferenceBand, 1e3 * kReferenceFloorS, out.string()),
               "Run the estimate on a quiet machine (another process was competing for the cores: `top` shows which), "
               "or give --profile RUN_DIR of a run made there; on a shared machine, pin the estimate to cores of its "
               "own (taskset, a Slurm allocation).");
}

}  // namespace

bool profiles_as_itself(const Registry& registry, const Experiment& e) {
  const RegistryEntry& entry = registry.at(PluginKind::kStrategy, e.strategy.name);
  if (entry.traits.placement.kind == Placement::Kind::kDevicesInProcess) return false;
  if (!entry.scheduler) return true;
  ScheduleInput one;
  one.units = {{"unit0", 1.0, {}, 0.0, 0.0}, {"unit1", 1.0, {}, 0.0, 0.0}};  // the last unit may be planned apart
  try {
    return estimate::strategy_schedule(entry, e.strategy.options, one).applicable;
  } catch (const Error&) {
    return false;
  }
}

void check_kinds(const std::string& device, const estimate::Network& net, double scale) {
  const std::string kind = device == "cpu" ? "cpu" : "gpu";
  if (net.device_kind.empty() || net.device_kind == kind) {
    if (scale > 0)
      throw UsageError(fmt::format("--compute-scale {:g}: the profile ({}) and the network ({}) are of one kind of "
                                   "device: there is nothing to scale.",
                                   scale, device, net.name),
                       "Drop --compute-scale; it is for a profile of one kind of device estimated on another's network.");
    return;
  }
  if (scale > 0) return;
  const std::string theirs = net.device_kind == "gpu" ? "GPU" : "CPU";
  throw UsageError(fmt::format("the profile runs on {} but the network {} links {} devices: the profile's compute "
                               "times say nothing of those devices.",
                               device, net.name, theirs),
                   fmt::format("Give --profile RUN_DIR of a run on such a device (examples/profiles holds one of an "
                               "H200), or declare how much faster they compute with --compute-scale R (the {} devices "
                               "R times as fast as this profile's); or estimate with a network of this profile's kind "
                               "(`strata bench comms --json FILE` where it ran).",
                               theirs));
}

void scale_to_network(estimate::Profile& p, const estimate::Network& net, double scale) {
  check_kinds(p.device, net, scale);
  if (scale <= 0) return;
  for (double* t : {&p.step_s, &p.compute_s, &p.optimizer_s, &p.data_s, &p.other_s}) *t /= scale;
  for (auto& u : p.units)
    for (double* t : {&u.forward_s, &u.backward_s, &u.checkpointed_backward_s})
      if (*t > 0) *t /= scale;
  for (auto& [threads, seconds] : p.compute_by_threads) seconds /= scale;
  p.notes.push_back(fmt::format("the profile ran on {}, the network links {} devices: its compute divided by {:g} "
                                "(--compute-scale, declared, not measured)",
                                p.device, net.device_kind == "gpu" ? "GPU" : "CPU", scale));
}

estimate::Profile measure_profile(const EstimateTarget& target, const EstimateRequest& r, const Experiment& e,
                                  bool own_ok, const estimate::Network& network, const fs::path& out) {
  const fs::path profile_dir = r.profile.empty() ? run_profile(target, r, e, own_ok, out) : r.profile;
  estimate::Profile profile = estimate::read_profile(profile_dir, e);
  if (auto saved = estimate::load_units(profile_dir, profile.device)) {
    // Measured when this profile was first estimated, perhaps on a machine with its device (a GPU).
    profile.notes.push_back(fmt::format("the units as measured on {} beside the profile run ({})", profile.device,
                                        (profile_dir / "units.json").string()));
    estimate::attach_units(profile, std::move(*saved));
  } else try {
    estimate::UnitTiming timing;
    timing.device = profile.device;
    timing.threads = profile.threads;
    std::cout << fmt::format("profile: the model's units one by one on {}", profile.device) << std::endl;
    auto units = estimate::model_units(e, &timing);
    estimate::save_units(profile_dir, profile.device, units);
    estimate::attach_units(profile, std::move(units));
  } catch (const std::exception& ex) {
    profile.notes.push_back(std::string("the model's units could not be profiled here (") + ex.what() + ")");
    estimate::attach_units(profile, {});
  }
  const std::string blocked = profile_blocked(e, own_ok);
  if (!blocked.empty() && profile.device == "cpu")
    profile.notes.push_back(fmt::format("no runs at other thread counts ({} of '{}' in the experiment file is not `{}`'s): "
                                        "the step's work taken to scale linearly with threads",
                                        blocked, e.strategy.name, target.one_device));
  if (profile.device == "cpu" && profile.threads > 0 && profile.host_threads > 0 && blocked.empty()) {
    // CPU ranks compute with fewer threads than the profile did: how much slower, measured rather
    // than assumed, by short runs with each such count between two with the profile's own count,
    // so that the ratio compares runs of one moment of a shared machine.
    std::vector<int> counts;
    for (int n : target.world_sizes) {
      const int threads = estimate::rank_threads(profile, network, n);
      if (threads != profile.threads && std::find(counts.begin(), counts.end(), threads) == counts.end())
        counts.push_back(threads);
    }
    if (!counts.empty()) {
      auto work = [&](int threads, const std::string& dir) {
        return estimate::read_profile(run_profile(target, r, e, own_ok, out / dir, threads), e).work_s();
      };
      std::vector<double> references{reference_run(work, profile.threads, "before", 0)};
      std::map<int, double> measured;
      for (int threads : counts) measured[threads] = work(threads, "");
      references.push_back(reference_run(work, profile.threads, "after", 1));
      // References of one moment agree; while they do not, more (up to kMaxReferences) say which
      // is the odd one out. Without a majority that agrees no ratio between thread counts holds.
      while (agreeing(references).empty() && references.size() < kMaxReferences)
        references.push_back(
            reference_run(work, profile.threads, fmt::format("again-{}", references.size() - 1), references.size()));
      const auto agreed = agreeing(references);
      if (agreed.empty()) throw contradictory_references(references, profile.threads, out);
      const double reference = median(agreed);
      profile.reference_spread = spread(agreed);
      if (references.size() > 2)
        profile.notes.push_back(fmt::format("{} reference runs at {} thread{}, {} of them within {:.0f}% (spread of all "
                                            "{:.0f}%): their median is the reference",
                                            references.size(), profile.threads, profile.threads == 1 ? "" : "s",
                                            agreed.size(), 100 * kReferenceBand, 100 * spread(references)));
      const double own = profile.work_s();
      for (const auto& [threads, seconds] : measured) {
        profile.compute_by_threads[threads] = own * seconds / reference;
        profile.notes.push_back(fmt::format("at {} thread{} the step's work takes {:.2f}x as long as at {} (runs of their own, "
                                            "{:.3g} ms against {:.3g} ms)",
                                            threads, threads == 1 ? "" : "s", seconds / reference, profile.threads,
                                            1e3 * seconds, 1e3 * reference));
      }
    }
  }

  return profile;
}

}  // namespace strata::estimate_run
