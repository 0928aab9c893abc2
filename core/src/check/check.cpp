// `strata check NAME`: runs the named strategy and the reference (the strategy that runs on one
// device) as real `strata run` children on small experiments that it writes into its own
// directory, and holds the strategy to the Strategy contract: the same final model as the
// reference, tensor by tensor, or what its declared Equivalence says (exact under named options, a
// loss band); model-state memory and bus bytes as its declared schedule (strata/schedule.hpp) says
// for each workload, world size and option set (consistency bounds when it declares none); a full
// state dict that the reference loads back; and clean errors for bad options.

#include "check/check.hpp"
#include "check/figures.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sweep/sweep.hpp"
#include "config/experiment.hpp"
#include "estimate/profile.hpp"
#include "strata/schedule.hpp"
#include "io/run_dir.hpp"
#include "io/run_result.hpp"
#include "launch/child.hpp"
#include "run.hpp"
#include "strata/errors.hpp"
#include "strata/registry.hpp"
#include "text/suggest.hpp"
#include "text/table.hpp"
#include "train/model_diff.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

using detail::Variant;
using detail::Workload;
using detail::kMicroBatches;
using detail::reference_strategy;
using detail::variants_of;
using detail::workload_toml;
using detail::workloads_of;

constexpr double kExactTensorRel = 1e-5;  // every tensor of the final model, relative to its largest value
constexpr double kExactLossAbs = 1e-4;  // final_loss, absolute
constexpr double kRoundTripRel = 1e-9;  // param_norm of the saved model reloaded by the reference
constexpr double kReloadLr = 1e-12;     // the reloading run's one step moves nothing measurable
constexpr std::int64_t kSteps = 24;
constexpr std::int64_t kMinGlobalBatch = 24;
constexpr std::int64_t kMaxGlobalBatch = 4096;
constexpr const char* kUnknownOption = "definitely_not_an_option";
constexpr const char* kCrashMarkers[] = {"terminate called", "Segmentation", "Exception raised from", "core dumped",
                                         "Aborted"};

enum class Verdict { kPass, kFail, kNotApplicable };

struct CheckRow {
  std::string check;
  std::string world;  ///< "-" for checks done once
  Verdict verdict = Verdict::kFail;
  std::string detail;
};

/// One child `strata` command and what it left.
struct Outcome {
  std::string label;
  fs::path dir;
  int exit_code = -1;  ///< -1: not started (the check was interrupted)
  std::vector<std::string> lines;
  RunResult result;

  bool ok() const { return exit_code == 0 && result.status == "ok"; }
  double number(const std::string& path) const { return result.number(path); }
  /// Why it failed, for the table.
  std::string failure() const {
    if (exit_code < 0) return "not run (interrupted)";
    const std::string error = result.error.empty() ? error_from_output(lines) : result.error;
    return fmt::format("{} failed (exit {}): {} [{}]", label, exit_code, error, (dir / "output.log").string());
  }
};

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

std::string clip(std::string text, std::size_t limit = 240) {
  if (text.size() > limit) text = text.substr(0, limit - 3) + "...";
  return text;
}

class Checker {
 public:
  Checker(const RegistryEntry& entry, std::string reference, std::vector<int> worlds, fs::path dir,
          std::vector<Workload> workloads, std::vector<Variant> variants, std::int64_t steps)
      : entry_(entry), reference_(std::move(reference)), worlds_(std::move(worlds)), dir_(std::move(dir)),
        workloads_(std::move(workloads)), variants_(std::move(variants)), steps_(steps) {
    for (const auto& w : workloads_) files_.push_back(dir_ / (std::string(w.name) + ".toml"));
    units_.resize(workloads_.size());
    for (const auto& spec : entry_.schema.specs)
      for (auto& v : detail::violating_values(spec)) violations_.push_back({spec.name, std::move(v)});
    // The equivalence's conditions on the experiment (dotted exact_when names) each workload does
    // not meet, read once: it runs the exact options only where there are none.
    int exact_runs = 0;
    for (const auto& file : files_) {
      std::vector<std::string> unmet;
      for (const auto& [key, value] : entry_.traits.equivalence.exact_when)
        if (key.find('.') != std::string::npos)
          if (const std::string has = detail::experiment_value(file.string(), key); has != value)
            unmet.push_back(fmt::format("{} = {} (this workload: {})", key, value, has.empty() ? "unset" : has));
      exact_runs += exact_when() && unmet.empty() ? 1 : 0;
      unmet_.push_back(std::move(unmet));
    }
    total_ = static_cast<int>(workloads_.size()) + 1 + static_cast<int>(violations_.size());
    for (int w : worlds_)
      if (allowed(w))
        for (const auto& v : variants_)
          total_ += (v.all_workloads ? static_cast<int>(workloads_.size()) + exact_runs + 1 : 1) +
                    (band_reference() && v.all_workloads ? static_cast<int>(workloads_.size()) : 0);
  }

  /// Runs every check; returns the signal that interrupted the check (0 if none).
  int run_all() {
    for (std::size_t i = 0; i < workloads_.size(); ++i)
      references_.push_back(run(fmt::format("{}, {}", reference_, workloads_[i].title),
                                fmt::format("{}_{}", reference_, workloads_[i].name), {"run", files_[i].string()},
                                {"train.save_final=true"}));
    for (int w : worlds_)
      for (const auto& v : variants_) check_world(w, v);
    check_bad_options();
    return interrupted_;
  }

  int count(Verdict v) const {
    return static_cast<int>(std::count_if(rows_.begin(), rows_.end(), [v](const CheckRow& r) { return r.verdict == v; }));
  }

  /// The rows as a Markdown table.
  std::string table() const {
    std::vector<std::vector<std::string>> grid{{"check", "world", "result", "detail"}};
    for (const auto& r : rows_)
      grid.push_back({r.check, r.world,
                      r.verdict == Verdict::kPass ? "PASS" : r.verdict == Verdict::kFail ? "FAIL" : "n/a", r.detail});
    return detail::markdown_table(grid, "lrln");
  }

 private:
  bool allowed(int w) const { return world_overrides(entry_.traits.placement, w).has_value(); }
  bool exact_when() const { return !entry_.traits.equivalence.exact_when.empty(); }
  /// A loss band against another strategy than the reference runs (run at each world size).
  bool band_reference() const {
    const auto& eq = entry_.traits.equivalence;
    return !eq.exact && eq.loss_band > 0 && eq.reference != reference_;
  }

  /// The overrides that run `strategy` at world size w with `options` ("KEY=VALUE").
  std::vector<std::string> strategy_sets(const std::string& strategy, int w, const std::vector<std::string>& options) const {
    std::vector<std::string> sets{fmt::format("strategy.name={}", strategy)};
    if (const auto world_sets = world_overrides(entry_.traits.placement, w))
      for (const auto& [key, value] : *world_sets) sets.push_back(key + "=" + value);
    for (const auto& o : options) sets.push_back("strategy." + o);
    return sets;
  }

  /// Runs `strata ARGS` (`run` commands get --out), one progress line.
  Outcome run(const std::string& title, const std::string& label, std::vector<std::string> args,
              const std::vector<std::string>& sets = {}) {
    Outcome o;
    o.label = label;
    o.dir = dir_ / "runs" / label;
    if (interrupted_) return o;
    if (args.front() == "run") args.insert(args.end(), {"--out", o.dir.string()});
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    std::cout << fmt::format("[{:>{}}/{}] {}: ", ++started_, std::to_string(total_).size(), total_, title)
              << std::flush;
    auto logged = run_logged(args, o.dir);
    const auto& child = logged.outcome;
    const double seconds = logged.seconds;
    o.lines = std::move(logged.lines);
    o.exit_code = child.exit_code;
    if (args.front() == "run") o.result = read_run_result(o.dir);
    if (!logged.log_error.empty()) {  // the run's record is incomplete: not a pass
      o.result.status = "failed";
      o.result.error = logged.log_error;
    }
    if (child.interrupted) interrupted_ = child.interrupted;
    std::cout << fmt::format("exit {} in {:.1f} s{}\n", o.exit_code, seconds,
                             args.front() != "run" || o.ok() ? "" : " (failed)");
    return o;
  }

  void add(std::string check, int world, Verdict verdict, std::string detail) {
    rows_.push_back({std::move(check), world > 0 ? std::to_string(world) : "-", verdict, std::move(detail)});
  }

  /// The schedule's input for workload i at world size w and optimizer step `step`.
  ScheduleInput schedule_input(std::size_t i, int w, std::int64_t step) {
    if (!units_[i]) units_[i] = estimate::model_units(load_experiment(files_[i]));
    ScheduleInput in;
    in.topology = {w, w};  // every rank of the check on this host
    in.micro_batches = workloads_[i].micro_batches;
    in.step = step;
    in.steps = steps_;
    for (const auto& u : *units_[i]) in.units.push_back({u.name, u.params, u.tensors, 0.0, 0.0});
    in.tied = estimate::tied_units(*units_[i]);
    const std::string optimizer = workloads_[i].optimizer;
    in.optimizer_bytes = optimizer.find("adamw") != std::string::npos ? 8.0
                         : optimizer.find("momentum") != std::string::npos ? 4.0 : 0.0;
    in.cpu = true;
    return in;
  }

  /// The strategy's schedules for variant v on workload i at world size w: one per step the run takes.
  std::vector<Schedule> schedules(const Variant& v, std::size_t i, int w) {
    std::vector<Schedule> out;
    if (!entry_.scheduler) return out;
    const Options options = strategy_options_from(load_experiment(files_[i]), entry_, v.sets);
    for (std::int64_t step = 0; step < steps_; ++step)
      out.push_back(estimate::strategy_schedule(entry_, options, schedule_input(i, w, step)));
    return out;
  }

  std::string title(const Variant& v, const std::string& what) const {
    return v.label.empty() ? what : fmt::format("{} [{}]", what, v.label);
  }

  void check_world(int w, const Variant& v) {
    const std::string suffix = v.label.empty() ? std::string() : " [" + v.label + "]";
    if (!allowed(w)) {
      if (v.label.empty())
        add("all checks", w, Verdict::kNotApplicable,
            fmt::format("'{}' runs in one process on one device: world size 1 only", entry_.name));
      return;
    }
    // The schedules every run of this world size is held to: per workload, one per step run.
    const std::size_t count = v.all_workloads ? workloads_.size() : 1;
    std::vector<std::vector<Schedule>> plans;
    for (std::size_t i = 0; i < count; ++i) plans.push_back(schedules(v, i, w));
    if (!plans[0].empty() && !plans[0].front().applicable) {  // groups that do not divide this world size
      add(title(v, "all checks"), w, Verdict::kNotApplicable,
          fmt::format("strategy.{}: {}", plans[0].front().option, plans[0].front().note));
      return;
    }
    std::vector<Outcome> runs;
    const std::string tag = v.label.empty() ? std::string() : "_" + slug(v.label);
    for (std::size_t i = 0; i < count; ++i) {
      const auto& wl = workloads_[i];
      auto sets = strategy_sets(entry_.name, w, v.sets);
      sets.push_back("train.save_final=true");
      runs.push_back(run(fmt::format("{} world {}, {}{}", entry_.name, w, wl.title, suffix),
                         fmt::format("{}_w{}_{}{}", entry_.name, w, wl.name, tag), {"run", files_[i].string()}, sets));
      check_equivalence(w, v, i, runs.back());
    }
    check_memory(w, v, runs[0], plans[0]);
    check_communication(w, v, runs, plans);
    if (v.all_workloads) check_round_trip(w, runs[0]);
  }

  static std::string slug(const std::string& text) {
    std::string s;
    for (char c : text) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return s;
  }

  /// Exact: every tensor of the final model within kExactTensorRel of the reference's (and the
  /// final loss). Exact under named options: that, with those options, besides the loss band
  /// with the defaults. A loss band: the final loss within the declared band of the named
  /// reference strategy's, at this world size.
  void check_equivalence(int w, const Variant& v, std::size_t i, const Outcome& run) {
    const auto& wl = workloads_[i];
    const auto& eq = entry_.traits.equivalence;
    const std::string check = title(v, fmt::format("equivalence {}", wl.title));
    const Outcome& ref = references_[i];
    if (!ref.ok())
      return add(check, w, Verdict::kFail, fmt::format("the reference run of {} failed: {}", reference_, ref.failure()));
    if (!run.ok()) return add(check, w, Verdict::kFail, run.failure());
    if (eq.exact) return add_exact(check, w, ref, run, "exact up to reduction order");
    if (exact_when() && v.all_workloads) {
      // Option names are set; a dotted name (optimizer.name) is a condition on the experiment,
      // checked on the workloads that meet it.
      std::vector<std::string> options = v.sets, shown;
      for (const auto& [key, value] : eq.exact_when) {
        shown.push_back(key + " = " + value);
        if (key.find('.') == std::string::npos) options.push_back(key + "=" + value);
      }
      const std::string with = check + fmt::format(" with {}", fmt::join(shown, ", "));
      if (!unmet_[i].empty()) {
        add(with, w, Verdict::kNotApplicable, fmt::format("exact only with {}", fmt::join(unmet_[i], ", ")));
      } else {
        auto sets = strategy_sets(entry_.name, w, options);
        sets.push_back("train.save_final=true");
        const Outcome exact = run_child(fmt::format("{} world {}, {}, {}", entry_.name, w, wl.title, fmt::join(shown, ", ")),
                                        fmt::format("{}_w{}_{}_exact", entry_.name, w, wl.name), i, sets);
        if (!exact.ok()) add(check + " (exact options)", w, Verdict::kFail, exact.failure());
        else add_exact(with, w, ref, exact, fmt::format("exact with {}", fmt::join(shown, ", ")));
      }
    }
    // The loss band, against the declared reference strategy at this world size (the one-device
    // reference: its own run).
    const Outcome* against = &ref;
    if (band_reference()) {  // one run per world size and workload, whichever option set asks first
      const std::string label = fmt::format("{}_w{}_{}", eq.reference, w, wl.name);
      auto it = band_references_.find(label);
      if (it == band_references_.end()) {
        if (!v.all_workloads) ++total_;  // not counted ahead for a matrix row
        it = band_references_
                 .emplace(label, run_child(fmt::format("{} world {}, {} (the band's reference)", eq.reference, w, wl.title),
                                           label, i, strategy_sets(eq.reference, w, {})))
                 .first;
      }
      if (!it->second.ok())
        return add(check, w, Verdict::kFail, fmt::format("the band's reference failed: {}", it->second.failure()));
      against = &it->second;
    }
    const double loss = run.number("final_loss"), base = against->number("final_loss");
    const double gap = std::abs(loss - base);
    const bool ok = std::isfinite(gap) && gap <= eq.loss_band;
    add(check, w, ok ? Verdict::kPass : Verdict::kFail,
        fmt::format("final_loss {:.6g} vs {}'s {:.6g}: abs {:.1e} {} {:g} after {} steps (loss band: {})", loss,
                    eq.reference, base, gap, ok ? "<=" : ">", eq.loss_band, steps_, eq.reason));
  }

  Outcome run_child(const std::string& what, const std::string& label, std::size_t i, const std::vector<std::string>& sets) {
    return run(what, label, {"run", files_[i].string()}, sets);
  }

  void add_exact(const std::string& check, int w, const Outcome& ref, const Outcome& run, const std::string& promise) {
    const auto diff = compare_saved_models(ref.dir / "final_model.pt", run.dir / "final_model.pt");
    if (!diff.problem.empty())
      return add(check, w, Verdict::kFail, fmt::format("the saved models cannot be compared: {}", diff.problem));
    const double loss = std::abs(run.number("final_loss") - ref.number("final_loss"));
    const bool tensors_ok = diff.max_rel <= kExactTensorRel;
    const bool loss_ok = std::isfinite(loss) && loss <= kExactLossAbs;
    const std::string detail = fmt::format("final model rel {:.1e} {} {:.0e} (worst: {}), final_loss abs {:.1e} {} {:.0e}",
                                           diff.max_rel, tensors_ok ? "<=" : ">", kExactTensorRel,
                                           diff.tensor.empty() ? "none differs" : diff.tensor, loss,
                                           loss_ok ? "<=" : ">", kExactLossAbs);
    const bool ok = tensors_ok && loss_ok;
    add(check, w, ok ? Verdict::kPass : Verdict::kFail,
        ok ? fmt::format("{} ({})", detail, promise) : fmt::format("{}; declared {}", detail, promise));
  }

  void check_memory(int w, const Variant& v, const Outcome& run, const std::vector<Schedule>& plans) {
    const std::string check = title(v, "memory");
    if (!run.ok()) return add(check, w, Verdict::kFail, run.failure());
    const auto found = check_figures::memory(w, run.result, plans);
    add(check, w, found.ok ? Verdict::kPass : Verdict::kFail, found.detail);
  }

  void check_communication(int w, const Variant& v, const std::vector<Outcome>& runs,
                           const std::vector<std::vector<Schedule>>& schedules_of) {
    const std::string check = title(v, "communication");
    std::vector<check_figures::WorkloadRun> of;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (!runs[i].ok()) return add(check, w, Verdict::kFail, runs[i].failure());
      of.push_back({&runs[i].result, workloads_[i].title, workloads_[i].micro_batches, &schedules_of[i]});
    }
    const auto found = check_figures::communication(w, of, entry_.scheduler != nullptr);
    add(check, w, found.ok ? Verdict::kPass : Verdict::kFail, found.detail);
  }

  /// The saved full model, loaded by the reference for one step at a negligible learning rate, has
  /// the saved run's final parameters.
  void check_round_trip(int w, const Outcome& run) {
    const std::string check = "state-dict round trip";
    if (!run.ok()) return add(check, w, Verdict::kFail, run.failure());
    const fs::path model = run.dir / "final_model.pt";
    if (!fs::exists(model))
      return add(check, w, Verdict::kFail, "the run wrote no final_model.pt (train.save_final = true)");
    const Outcome reload = run_reload(w, model);
    if (!reload.ok())
      return add(check, w, Verdict::kFail,
                 fmt::format("{} could not load final_model.pt: {}", reference_, reload.failure()));
    const double rel = relative(reload.number("param_norm"), run.number("param_norm"));
    const bool ok = std::isfinite(rel) && rel <= kRoundTripRel;
    add(check, w, ok ? Verdict::kPass : Verdict::kFail,
        fmt::format("param_norm rel {:.1e} {} {:.0e} after {} loaded final_model.pt{}", rel, ok ? "<=" : ">",
                    kRoundTripRel, reference_,
                    ok ? "" : fmt::format(" (saved {:.9f}, loaded {:.9f})", run.number("param_norm"),
                                          reload.number("param_norm"))));
  }

  Outcome run_reload(int w, const fs::path& model) {
    return run(fmt::format("{} loads {} world {}'s final_model.pt", reference_, entry_.name, w),
               fmt::format("{}_loads_{}_w{}", reference_, entry_.name, w), {"run", files_[0].string()},
               {fmt::format("train.init_from={}", model.string()), fmt::format("optimizer.lr={}", kReloadLr),
                "train.steps=1"});
  }

  /// `strata validate` with an unknown strategy option, then with each constrained option set to
  /// a value its constraint rejects: exit 2, one error paragraph naming the option, no crash.
  void check_bad_options() {
    check_rejected(kUnknownOption, "1", "unknown option");
    for (const auto& [option, v] : violations_) check_rejected(option, v.toml, fmt::format("must be {}", v.rule));
  }

  void check_rejected(const std::string& option, const std::string& value, const std::string& why) {
    const std::string key = fmt::format("strategy.{}", option);
    const std::string check = fmt::format("bad option {}={}", key, value);
    const Outcome o = run(fmt::format("validate {}={} ({})", key, value, why), fmt::format("validate_{}", option),
                          {"validate", files_[0].string(), "--set", fmt::format("strategy.name={}", entry_.name),
                           "--set", fmt::format("{}={}", key, value)});
    if (o.exit_code < 0) return add(check, 0, Verdict::kFail, o.failure());
    std::string problems, error;
    int errors = 0;
    for (const auto& line : o.lines) {
      if (line.rfind("error:", 0) == 0) {
        ++errors;
        error = line;
      }
      for (const char* marker : kCrashMarkers)
        if (line.find(marker) != std::string::npos) problems += fmt::format("; crash marker '{}'", marker);
    }
    if (o.exit_code != 2) problems += fmt::format("; exit {} instead of 2", o.exit_code);
    if (errors != 1) problems += fmt::format("; {} `error:` paragraphs instead of 1", errors);
    if (error.find(option) == std::string::npos) problems += fmt::format("; the error does not name {}", key);
    add(check, 0, problems.empty() ? Verdict::kPass : Verdict::kFail,
        problems.empty() ? fmt::format("{}: exit 2, {}", why, clip(error, 160))
                         : fmt::format("{}{} [{}]", why, problems, (o.dir / "output.log").string()));
  }

  const RegistryEntry& entry_;
  std::string reference_;  ///< the strategy on one device every run is compared with
  std::vector<int> worlds_;
  fs::path dir_;
  std::vector<Workload> workloads_;  ///< the experiments every world size runs
  std::vector<Variant> variants_;    ///< the defaults, then the option matrix
  std::int64_t steps_;
  std::vector<fs::path> files_;  ///< the workloads' experiment files, in workloads_ order
  std::vector<std::optional<std::vector<estimate::UnitProfile>>> units_;  ///< per workload: its model's units, once built
  std::vector<std::pair<std::string, detail::Violation>> violations_;
  std::vector<Outcome> references_;  ///< the reference on each workload
  std::vector<CheckRow> rows_;
  std::vector<std::vector<std::string>> unmet_;  // per workload: the exactness conditions it does not meet
  std::map<std::string, Outcome> band_references_;  // by run label: the band's reference runs
  int total_ = 0, started_ = 0;
  int interrupted_ = 0;
};

/// A fresh directory strata-check-NAME-XXXXXX under the system's temporary directory ($TMPDIR).
fs::path fresh_temp_directory(const std::string& name) {
  std::string safe = name;
  for (char& c : safe)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
  std::string pattern = (fs::temp_directory_path() / fmt::format("strata-check-{}-XXXXXX", safe)).string();
  if (!::mkdtemp(pattern.data()))
    throw Error(fmt::format("cannot create a directory for the check's runs ({}): {}", pattern, std::strerror(errno)),
                "Set TMPDIR to a writable directory, or give --out DIR.");
  return pattern;
}

/// The suite of one strategy (`entry`; request.strategy is its name).
int check_one(const CheckRequest& request, const RegistryEntry& entry, const std::string& reference) {
  const std::vector<Variant> variants = variants_of(request.sets, request.matrix, entry);
  const auto& eq = entry.traits.equivalence;
  const std::int64_t steps = eq.steps > 0 ? eq.steps : kSteps;
  std::vector<int> worlds = request.world_sizes;
  std::sort(worlds.begin(), worlds.end());
  worlds.erase(std::unique(worlds.begin(), worlds.end()), worlds.end());
  if (worlds.empty() || worlds.front() < 1)
    throw UsageError("`strata check` needs positive world sizes.", "Write for example `--world-sizes 1,2,3`.");
  const std::vector<Workload> workloads = workloads_of(request.models);
  const std::int64_t batch = detail::common_global_batch(worlds, kMicroBatches, kMinGlobalBatch);
  if (batch > kMaxGlobalBatch)
    throw UsageError(fmt::format("world sizes {} need a global batch of {} (a multiple of each of them and of {} "
                                 "micro-batches); the check allows at most {}.",
                                 fmt::join(worlds, ","), batch, kMicroBatches, kMaxGlobalBatch),
                     "Check fewer world sizes at once.");

  fs::path dir = request.out;
  if (dir.empty()) {
    dir = fresh_temp_directory(request.strategy);
  } else {
    if (fs::exists(dir) && !(fs::is_directory(dir) && fs::is_empty(dir)))
      throw UsageError(fmt::format("--out {} exists and is not an empty directory.", dir.string()),
                       "Choose a new --out directory (the check writes its experiments and runs there).");
    fs::create_directories(dir);
  }
  // The experiments, written first and validated here with the reference: a missing model or
  // dataset plugin is a configuration error (exit 2), not a failure of the strategy.
  try {
    for (const auto& w : workloads) {
      const fs::path file = dir / (std::string(w.name) + ".toml");
      write_text_file(file, workload_toml(w, batch, reference, steps));
      check_experiment(load_experiment(file));
    }
    // Every option set's values, before any run: a value the schema rejects is a usage error here.
    const Experiment first = load_experiment(dir / (std::string(workloads.front().name) + ".toml"));
    for (const auto& v : variants) try {
        (void)strategy_options_from(first, entry, v.sets);
      } catch (const ConfigError& e) {  // about a --set, not about the check's own file
        throw UsageError(fmt::format("--set {}: {}", e.key(), e.what()), e.fix());
      }
  } catch (...) {
    std::error_code ignored;
    if (request.out.empty()) fs::remove_all(dir, ignored);  // nothing ran: leave no temporary directory
    throw;
  }

  std::string promise = "exact up to reduction order";
  if (!eq.exact) {
    std::vector<std::string> shown;
    for (const auto& [key, value] : eq.exact_when) shown.push_back(key + " = " + value);
    promise = fmt::format("{}final loss within {:g} of {}'s ({})",
                          shown.empty() ? std::string() : fmt::format("exact with {}; otherwise ", fmt::join(shown, ", ")),
                          eq.loss_band, eq.reference, eq.reason);
  }
  std::cout << fmt::format("strata check {}: world sizes {}; {} steps, global batch {}; equivalence with {}: {}; "
                           "{} option set{}; runs in {}\n",
                           entry.name, fmt::join(worlds, ", "), steps, batch, reference, promise, variants.size(),
                           variants.size() == 1 ? "" : "s", dir.string())
            << std::flush;
  Checker checker(entry, reference, worlds, dir, workloads, variants, steps);
  const int interrupted = checker.run_all();
  const std::string table = checker.table();
  write_text_file(dir / "check.md", table);
  const int passed = checker.count(Verdict::kPass), failed = checker.count(Verdict::kFail);
  const int na = checker.count(Verdict::kNotApplicable);
  std::cout << "\n" << table << "\n";
  std::cout << fmt::format("strata check {}: {} passed, {} failed{}{}\n", entry.name, passed, failed,
                           na ? fmt::format(", {} n/a", na) : std::string(), interrupted ? " (interrupted)" : "");
  if (failed > 0 || interrupted || !request.out.empty()) {
    std::cout << fmt::format("outputs: {} (the experiments, and each run's output.log and summary.json under runs/)\n",
                             dir.string());
  } else {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  if (interrupted) return 128 + interrupted;
  return failed > 0 ? 1 : 0;
}

}  // namespace

int check_strategy(const CheckRequest& request) {
  require_single_process("check");
  // "a,b,c": every name is looked up before any run, then each strategy's suite runs in
  // turn, in --out DIR/NAME when --out is given.
  const std::vector<std::string> names = parse_strategy_names(request.strategy);
  Registry registry;
  load_registry(registry, nullptr);
  std::vector<const RegistryEntry*> entries;
  for (const auto& name : names) entries.push_back(&registry.at(PluginKind::kStrategy, name));
  const std::string reference = reference_strategy(registry);
  if (names.size() == 1) return check_one(request, *entries.front(), reference);
  if (!request.out.empty() && fs::exists(request.out) && !(fs::is_directory(request.out) && fs::is_empty(request.out)))
    throw UsageError(fmt::format("--out {} exists and is not an empty directory.", request.out.string()),
                     "Choose a new --out directory (the check writes each strategy's runs in a folder of it).");
  std::vector<std::string> failed;
  for (std::size_t i = 0; i < names.size(); ++i) {
    CheckRequest one = request;
    one.strategy = names[i];
    if (!request.out.empty()) one.out = request.out / names[i];
    const int code = check_one(one, *entries[i], reference);
    if (code >= 128) return code;  // interrupted: stop here
    if (code != 0) failed.push_back(names[i]);
    std::cout << "\n";
  }
  std::cout << fmt::format("strata check {}: {} of {} strategies passed{}\n", request.strategy,
                           names.size() - failed.size(), names.size(),
                           failed.empty() ? std::string() : fmt::format(" (failed: {})", fmt::join(failed, ", ")));
  return failed.empty() ? 0 : 1;
}

}  // namespace strata
