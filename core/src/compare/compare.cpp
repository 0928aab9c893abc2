// `strata compare`: validates a whole sweep, runs every combination as a real `strata run` (a
// child process each, so a crash or a failed rank costs one row, not the comparison), and writes
// results.csv, results.json, results.md and report.html next to the runs' own directories.
//
// How it measures: a short warm-up run first, then rounds: round r runs every
// combination once, in an order shuffled from (seed, r), before round r + 1 starts, so that a
// shared machine's drift (another job starting, the clock throttling) spreads over all
// combinations instead of falling on whichever ran last. The auto-repeat mode adds rounds until
// every combination's range is tight, or max_repeats or the time budget is reached.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compare/accuracy.hpp"
#include "compare/results.hpp"
#include "compare/resume.hpp"
#include "sweep/sweep_check.hpp"
#include "estimate/estimate.hpp"
#include "io/atomic_file.hpp"
#include "io/run_dir.hpp"
#include "io/run_result.hpp"
#include "launch/child.hpp"
#include "job/verdict.hpp"
#include "run.hpp"
#include "tensorboard/event_writer.hpp"
#include "tensorboard/hparams.hpp"
#include "text/wrap.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// Why a run that left no verdict of its own failed: the signal that ended it, else the error
/// paragraph it printed, else its exit code and last lines that are not progress.
std::string failure_cause(const ChildOutcome& outcome, const std::vector<std::string>& lines) {
  // run_self reports a death by signal N as 128 + N; a strata process that exits by itself
  // leaves summary.json first, so without one this is the kernel's doing (OOM killer, kill -9).
  if (outcome.exit_code > 128 && outcome.exit_code <= 128 + 64)
    return fmt::format("killed by signal {} ({})", outcome.exit_code - 128, signal_name(outcome.exit_code - 128));
  for (const auto& l : lines)
    if (l.rfind("error:", 0) == 0 || l.find("] error:") != std::string::npos) return error_from_output(lines);
  std::vector<std::string> kept;
  for (const auto& l : lines)
    if (l.rfind("step ", 0) != 0 && l.rfind("eval at", 0) != 0) kept.push_back(l);
  std::string tail = error_from_output(kept);
  return fmt::format("exited with code {}{}", outcome.exit_code, kept.empty() ? std::string() : ": " + tail);
}

/// The `strata run` arguments of `run` writing to `dir`.
std::vector<std::string> run_args(const Sweep& sweep, const SweepRun& run, const fs::path& dir) {
  std::vector<std::string> args = {"run", fs::absolute(sweep.base).string(), "--out", dir.string()};
  for (const auto& o : run.overrides) args.insert(args.end(), {"--set", o});
  return args;
}

/// The steps of the warm-up run of `run`: warmup_run_steps, at most the run's own.
std::int64_t warmup_steps(const Sweep& sweep, const SweepRun& run) {
  return run.steps > 0 ? std::min(sweep.measure.warmup_run_steps, run.steps) : sweep.measure.warmup_run_steps;
}

class Comparison {
 public:
  Comparison(Sweep sweep, SweepPlan plan, fs::path dir, bool resuming)
      : sweep_(std::move(sweep)), plan_(std::move(plan)), resuming_(resuming) {
    rec_.sweep = &sweep_;
    rec_.plan = &plan_;
    rec_.dir = std::move(dir);
    rec_.date = utc_time("%Y-%m-%d %H:%M UTC");
    rec_.machine = machine_description();
    for (const auto& run : plan_.runs) add_row(run);
    tty_ = isatty(STDOUT_FILENO) == 1;
  }
  Comparison(const Comparison&) = delete;  // rec_ points into sweep_ and plan_
  Comparison& operator=(const Comparison&) = delete;

  /// The warm-up run, then the rounds; returns the signal that interrupted the comparison (0 if none).
  int run_all() {
    const auto started = Clock::now();
    if (plan_.combinations.empty()) return 0;
    const bool all_kept = resuming_ && std::all_of(rec_.rows.begin(), rec_.rows.end(), [](const CompareRow& r) {
      return read_run_result(r.dir).status == "ok";
    });
    if (sweep_.measure.warmup_run_steps > 0 && !all_kept)
      if (const int sig = run_warmup(round_runs(plan_, sweep_.measure, 1).front())) return stop(sig, "during the warm-up run");
    double last_round_s = 0;
    for (int round = 1;; ++round) {
      const auto runs = round_runs(plan_, sweep_.measure, round);
      if (round > sweep_.repeats) {
        if (!another_round(round, seconds_since(started), last_round_s)) break;
        for (const auto& run : runs) add_row(run);
        std::stable_sort(rec_.rows.begin(), rec_.rows.end(), [](const CompareRow& a, const CompareRow& b) {
          return a.run.combination != b.run.combination ? a.run.combination < b.run.combination : a.run.repeat < b.run.repeat;
        });
      }
      auto& labels = rec_.rounds.emplace_back();
      for (const auto& run : runs) labels.push_back(run.label);
      const auto round_started = Clock::now();
      for (const auto& run : runs)
        if (const int sig = run_one(row_of(run.combination, round))) return stop(sig, "before this run");
      last_round_s = seconds_since(round_started);
    }
    return 0;
  }

  /// Writes the HPARAMS experiment of the comparison: TensorBoard then lists the sweep's axes
  /// (strategy and world size first) as differing, and the runs' summary figures as metrics.
  /// It goes into every run's directory, after the runs: TensorBoard takes the first experiment it
  /// finds in any run, and a run is a directory holding events, so an event file at the
  /// comparison's root would show as a stray run named ".". (Before its run, a run's directory
  /// must hold no events: `strata run` would take them for an earlier run's and refuse it.)
  void write_hparams_experiment() const {
    std::vector<tb::HParamInfo> hparams;
    const auto add = [&](tb::HParamInfo info) {
      for (auto& h : hparams)
        if (h.name == info.name) {
          h.differs = h.differs || info.differs;
          return;
        }
      hparams.push_back(std::move(info));
    };
    const auto& core = tb::core_hparams();
    const auto core_info = [&](const std::string& name) {
      return *std::find_if(core.begin(), core.end(), [&](const tb::HParamInfo& h) { return h.name == name; });
    };
    const auto is_axis = [&](const std::string& key) {
      return std::any_of(sweep_.axes.begin(), sweep_.axes.end(), [&](const SweepAxis& a) { return a.key == key; });
    };
    for (const char* name : {"strategy", "world_size", "devices"}) {
      auto info = core_info(name);
      // The comparison's world size counts devices (dp's replicas run in one rank).
      info.differs = is_axis(name == std::string("devices") ? "world_size" : name);
      add(info);
    }
    for (const auto& axis : sweep_.axes) {
      if (axis.key == "strategy" || axis.key == "world_size") continue;
      const std::string name = tb::hparam_name(axis.key);
      add({name, tb::type_of(tb::hparam_value(axis.values.front().toml)), true, "axis " + axis.key + " of the comparison"});
    }
    for (auto info : core) {
      if (info.name == "global_batch_size") info.differs = sweep_.scaling == "weak" && is_axis("world_size");
      add(info);
    }
    for (const auto& row : rec_.rows) {
      if (!fs::is_directory(row.dir)) continue;  // not started
      try {  // the runs are done: a full disk here must not cost the results tables
        tb::EventWriter events(row.dir);
        events.add_hparams_experiment(hparams, tb::summary_metrics(),
                                      "strata compare " + sweep_.file.string() + " (base " + sweep_.base.string() + ")");
      } catch (const std::exception& e) {
        std::cerr << "strata: warning: TensorBoard's HPARAMS experiment was not written: " << e.what() << "\n";
        return;
      }
    }
  }

  /// The combinations' spreads, intervals and verdicts, each run's own speedup, and (auto-repeat)
  /// the combinations still loose.
  void summarize() {
    std::vector<MeasuredRun> runs;
    for (const auto& row : rec_.rows) {
      const SweepRun& base = baseline_of(row.run);
      runs.push_back({series_of(row.run), row.run.world_size, row.run.label, &row.result, series_of(base),
                      base.world_size, work_of(row.run)});
    }
    rec_.aggregate = aggregate(runs, {sweep_.scaling, sweep_.measure.noise_threshold});
    for (std::size_t i = 0; i < rec_.rows.size(); ++i) {
      rec_.rows[i].speedup = rec_.aggregate.speedup[i];
      rec_.rows[i].efficiency = rec_.aggregate.efficiency[i];
    }
    if (sweep_.measure.until_tight > 0) rec_.loose = loose_cells(rec_.aggregate.cells, sweep_.measure.until_tight);
  }

  /// Writes results.csv, results.json, results.md and report.html; returns results.md's text.
  std::string write_outputs() const {
    write_text_file(rec_.dir / "results.csv", results_csv(rec_));
    write_text_file(rec_.dir / "results.json", results_json(rec_).dump() + "\n");
    std::string md = results_markdown(rec_);
    write_text_file(rec_.dir / "results.md", md);
    write_text_file(rec_.dir / "report.html", render_report(comparison_report(rec_)));
    return md;
  }

  const CompareRecord& record() const { return rec_; }

  int failed() const {
    return static_cast<int>(
        std::count_if(rec_.rows.begin(), rec_.rows.end(), [](const CompareRow& r) { return r.status() != "ok"; }));
  }

 private:
  void add_row(const SweepRun& run) {
    CompareRow row;
    row.run = run;
    row.dir = rec_.dir / run.label;
    row.result.status = "not started";  // until it starts, it has not
    rec_.rows.push_back(std::move(row));
  }

  CompareRow& row_of(std::size_t combination, int repeat) {
    return *std::find_if(rec_.rows.begin(), rec_.rows.end(), [&](const CompareRow& r) {
      return r.run.combination == combination && r.run.repeat == repeat;
    });
  }

  /// The combination `run` is measured against: its values with the baseline's put in.
  const SweepRun& baseline_of(const SweepRun& run) const {
    auto values = run.values;
    for (auto& [key, display] : values)
      for (const auto& [bkey, bvalue] : sweep_.baseline)
        if (key == bkey) display = bvalue;
    for (const auto& c : plan_.combinations)
      if (c.values == values) return c;
    return plan_.combinations[run.combination];  // plan_sweep() refuses a baseline that is not run
  }

  /// The runs not started get the cause; returns `sig`.
  int stop(int sig, const char* when) {
    for (auto& row : rec_.rows)
      if (row.order == 0) row.result.error = fmt::format("the comparison was interrupted ({}) {}", signal_name(sig), when);
    return sig;
  }

  /// Whether round `round` (> repeats) runs in the auto-repeat mode; sets rec_.stopped when not.
  bool another_round(int round, double elapsed_s, double last_round_s) {
    if (!sweep_.auto_repeat()) return false;
    const int done = round - 1;
    summarize();
    if (sweep_.measure.until_tight > 0 && rec_.loose.empty()) {
      rec_.stopped = fmt::format("every combination's steady step time within {:g} (relative range) after {} round{}",
                                 sweep_.measure.until_tight, done, done == 1 ? "" : "s");
      return false;
    }
    if (round > sweep_.max_rounds()) {
      rec_.stopped = fmt::format("stopped after {} rounds: max_repeats {} reached", done, sweep_.max_rounds());
      return false;
    }
    if (sweep_.measure.budget_s > 0 && elapsed_s + last_round_s > sweep_.measure.budget_s) {
      rec_.stopped = fmt::format("stopped after {} round{}: another (about {:.0f} s) would end past the budget of {:g} s "
                                 "({:.0f} s spent)",
                                 done, done == 1 ? "" : "s", last_round_s, sweep_.measure.budget_s, elapsed_s);
      return false;
    }
    std::cout << fmt::format("round {}: {}\n", round,
                             rec_.loose.empty() ? fmt::format("within the budget of {:g} s", sweep_.measure.budget_s)
                                                : fmt::format("still loose: {}", fmt::join(rec_.loose, ", ")));
    return true;
  }

  /// The short run of `first` before the first round: it pays for what the first process of a
  /// series pays alone (the binary, LibTorch and the dataset read into the page cache, the CPU's
  /// clock ramping up), which each run's own timing_warmup_steps cannot leave out. Its directory
  /// keeps only output.log: its events would show in TensorBoard beside the measured runs.
  int run_warmup(const SweepRun& first) {
    ReportWarmup w;
    w.combination = first.label;
    w.steps = warmup_steps(sweep_, first);
    w.dir = "warmup";
    const fs::path dir = rec_.dir / w.dir;
    auto args = run_args(sweep_, first, dir);
    args.insert(args.end(), {"--set", fmt::format("train.steps={}", w.steps)});
    const std::string prefix = fmt::format("warm-up: {} steps of {} (discarded from the figures)", w.steps, w.combination);
    status_line(prefix + ": starting");
    int interrupted = 0;
    try {
      const LoggedChild child = run_logged(args, dir, [&](const std::string& line) {
        if (line.rfind("step ", 0) == 0) status_line(prefix + ": " + line);
      });
      const RunResult result = read_run_result(dir);
      interrupted = child.outcome.interrupted;
      w.seconds = child.seconds;
      w.status = interrupted ? "interrupted" : child.outcome.exit_code == 0 && result.status == "ok" ? "ok" : "failed";
      w.error = w.status == "ok" ? "" : !result.error.empty() ? result.error : failure_cause(child.outcome, child.lines);
    } catch (const std::exception& e) {
      w.status = "failed";
      w.error = std::string("it could not be started: ") + e.what();
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().filename() != "output.log") fs::remove_all(entry.path(), ec);
    finish_line(w.status == "ok" ? fmt::format("{}: ok in {:.1f} s", prefix, w.seconds)
                                 : fmt::format("{}: {}: {} (the rounds go on)", prefix, w.status, w.error));
    rec_.warmup = std::move(w);
    return interrupted;
  }

  /// --resume: keeps `row` when its run ended ok (returns true); else moves what an unfinished run
  /// left into discarded/ (kept, not deleted: the comparison owns it, a reader may want it).
  bool keep_or_set_aside(CompareRow& row, const std::string& prefix) {
    if (!resuming_ || !fs::exists(row.dir)) return false;
    RunResult result = read_run_result(row.dir);
    if (result.status == "ok" && fs::exists(row.dir / "output.log")) {
      row.result = std::move(result);
      rec_.kept.push_back(row.run.label);
      finish_line(fmt::format("{}: kept (ended ok in an earlier session)", prefix));
      return true;
    }
    const fs::path aside = rec_.dir / "discarded";
    fs::path to = aside / row.run.label;
    for (int k = 2; fs::exists(to); ++k) to = aside / fmt::format("{}.{}", row.run.label, k);
    std::error_code ec;
    fs::create_directories(aside, ec);
    fs::rename(row.dir, to, ec);
    if (ec)
      throw Error(fmt::format("cannot move the unfinished run {} aside to {}: {}", row.dir.string(), to.string(),
                              ec.message()),
                  "Free the directory (permissions, space) and resume again.");
    std::cout << fmt::format("{}: the earlier session's unfinished run ({}) moved to {}\n", prefix,
                             result.status == "not run" ? "no summary" : result.status, to.string());
    return false;
  }

  /// Runs one row; returns the signal that interrupted the comparison (0 if none).
  int run_one(CompareRow& row) {
    row.order = ++started_;
    const std::string prefix =
        fmt::format("[{:>{}}/{}] {}", row.order, std::to_string(rec_.rows.size()).size(), rec_.rows.size(), row.run.label);
    if (keep_or_set_aside(row, prefix)) {
      ++kept_;
      return 0;
    }
    status_line(prefix + ": starting");
    LoggedChild child;
    try {
      child = run_logged(run_args(sweep_, row.run, row.dir), row.dir, [&](const std::string& line) {
        if (line.rfind("step ", 0) == 0 || line.rfind("eval at", 0) == 0) status_line(prefix + ": " + line);
      });
    } catch (const std::exception& e) {  // no process (fork failed, no directory): the others may still run
      row.result.status = "failed";
      row.result.error = std::string("it could not be started: ") + e.what();
      finish_line(fmt::format("{}: not started: {}", prefix, row.result.error));
      return 0;
    }
    row.seconds = child.seconds;
    record(row, child);
    const StepTiming t = row.result.step_timing();
    // What is left of the first rounds, at the mean wall time of the runs so far (rounds the
    // auto-repeat mode adds are not known yet).
    seconds_run_ += child.seconds;
    const auto left = static_cast<double>(rec_.rows.size()) - static_cast<double>(row.order);
    const auto ran = static_cast<double>(row.order - kept_);
    const std::string eta =
        left > 0 ? fmt::format("; {} left, about {}", static_cast<long long>(left),
                               clock_text(seconds_run_ / ran * left))
                 : std::string();
    finish_line(row.status() == "ok"
                    ? fmt::format("{}: ok in {:.1f} s (steady {:.3g} ms/step, {:.0f} samples/s; train {:.2f} s, final "
                                  "loss {:.4f}){}",
                                  prefix, child.seconds, 1e3 * t.step_time_s, t.samples_per_s,
                                  row.number("train_time_s"), row.number("final_loss"), eta)
                    : fmt::format("{}: {} (exit {}): {}{}", prefix, row.status(), child.outcome.exit_code,
                                  row.result.error, eta));
    return child.outcome.interrupted;
  }

  /// "m:ss" or "h:mm:ss".
  static std::string clock_text(double seconds) {
    const auto s = static_cast<long long>(std::max(0.0, seconds) + 0.5);
    return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60) : fmt::format("{}:{:02}", s / 60, s % 60);
  }

  void status_line(const std::string& text) {
    if (tty_) {
      // One line, rewritten in place: cut at the terminal's width (one column spare for the cursor).
      const std::size_t columns = terminal_columns();
      const std::size_t width = columns > 40 ? columns - 1 : 118;
      std::string shown = text.size() > width ? text.substr(0, width - 1) + "…" : text;
      std::cout << "\r\033[K" << shown << std::flush;
    } else if (text.find(": starting") != std::string::npos) {
      std::cout << text << std::endl;
    }
  }
  void finish_line(const std::string& text) {
    // On a terminal, a run's line wraps at its width (its continuation indented under the label).
    std::cout << (tty_ ? "\r\033[K" + wrap_text(text, terminal_columns(), 4) : text) << std::endl;
  }

  /// The row of a run that ended: its own verdict (summary.json: status, error, failed_rank,
  /// signal) where it left one, else the cause its process's end tells.
  static void record(CompareRow& row, const LoggedChild& child) {
    const auto& outcome = child.outcome;
    row.result = read_run_result(row.dir);
    if (const auto& s = row.result.summary) {
      if (const Json* rank = s->find("failed_rank"); rank && rank->is_number())
        row.failed_rank = static_cast<std::int64_t>(rank->number_or(-1));
      if (const Json* sig = s->find("signal"); sig && sig->is_string()) row.signal = sig->string_or("");
    }
    const bool verdict = row.result.summary && row.status() != "not run";
    if (outcome.interrupted) {
      row.result.status = "interrupted";
      if (row.result.error.empty())
        row.result.error = fmt::format("the comparison was interrupted ({})", signal_name(outcome.interrupted));
    } else if (outcome.exit_code != 0 || row.status() != "ok") {
      if (!verdict || row.status() == "ok") row.result.status = "failed";
      if (!verdict && outcome.exit_code > 128 && outcome.exit_code <= 128 + 64 && row.signal.empty())
        row.signal = signal_name(outcome.exit_code - 128);
      if (row.result.error.empty()) row.result.error = failure_cause(outcome, child.lines);
    }
    // Its output.log is where a reader of the comparison looks; a run that lost it is not clean.
    if (!child.log_error.empty()) {
      if (row.status() == "ok") row.result.status = "failed";
      row.result.error += (row.result.error.empty() ? "" : "; ") + child.log_error;
    }
  }

  Sweep sweep_;
  SweepPlan plan_;
  CompareRecord rec_;
  bool resuming_ = false;  ///< --resume: runs that ended ok are kept
  int started_ = 0;  ///< runs started (or kept) so far
  int kept_ = 0;     ///< of them, kept from an earlier session
  double seconds_run_ = 0;  ///< wall time of the runs so far (the estimate of what is left)
  bool tty_ = false;
};

/// `--dry-run`: the warm-up run and the first `repeats` rounds, in the order they would run.
void print_dry_run(const Sweep& sweep, const SweepPlan& plan) {
  const auto command = [&](const SweepRun& run) {
    std::string sets;
    for (const auto& o : run.overrides) sets += " --set " + o;
    return fmt::format("strata run {}{}", sweep.base.string(), sets);
  };
  for (int round = 1; round <= sweep.repeats && !plan.combinations.empty(); ++round) {
    const auto runs = round_runs(plan, sweep.measure, round);
    if (round == 1 && sweep.measure.warmup_run_steps > 0) {
      const auto steps = warmup_steps(sweep, runs.front());
      std::cout << fmt::format("  warm-up ({} steps of {}, discarded): {} --set train.steps={}\n", steps,
                               runs.front().label, command(runs.front()), steps);
    }
    std::cout << fmt::format("round {}{}:\n", round,
                             sweep.measure.shuffle ? fmt::format(" (shuffled, seed {})", sweep.measure.seed) : "");
    for (const auto& run : runs) std::cout << fmt::format("  {}: {}\n", run.label, command(run));
  }
  if (sweep.auto_repeat())
    std::cout << fmt::format("then up to {} rounds in all (auto-repeat)\n", sweep.max_rounds());
}

/// The run of the baseline's cell with the median steady step time, when the baseline runs on one
/// device: the profile `strata estimate` reads (else it runs its own).
fs::path profile_run(const CompareRecord& record) {
  for (const auto& cell : record.aggregate.cells) {
    if (!cell.is_baseline || cell.world_size != 1 || cell.ok == 0) continue;
    const CompareRow* best = nullptr;
    double best_gap = INFINITY;
    for (const auto& row : record.rows) {
      if (row.status() != "ok" || std::find(cell.labels.begin(), cell.labels.end(), row.run.label) == cell.labels.end())
        continue;
      const double gap = std::fabs(row.number("steady_step_time_s") - cell.step_time_s.median);
      if (gap < best_gap) best_gap = gap, best = &row;
    }
    if (best != nullptr) return best->dir;
  }
  return {};
}

/// `--estimate`: `strata estimate` of the same sweep into DIR/estimate (from the baseline's run
/// when it is on one device), then its predictions beside the measurements: accuracy.md and .csv.
void estimate_beside(const CompareRequest& request, const CompareRecord& record) {
  EstimateRequest e;
  e.file = request.file;
  e.overrides = request.overrides;
  e.network = request.network;
  e.out = record.dir / "estimate";
  e.profile = profile_run(record);
  std::cout << "\n";
  const Accuracy a = accuracy(record.aggregate.cells, run_estimate(e));
  const std::string md = accuracy_markdown(a);
  write_file_atomically(record.dir / "accuracy.md",
                        "# Predicted against measured\n\nThe predictions of `strata estimate` (estimate/estimate.json, "
                        "from the profile " + (e.profile.empty() ? std::string("run by the estimate") : e.profile.string()) +
                            ") beside this comparison's medians.\n\n" + md);
  write_file_atomically(record.dir / "accuracy.csv", accuracy_csv(a));
  std::cout << "\npredicted against measured (accuracy.md, accuracy.csv):\n" << md;
}

}  // namespace

int compare_strategies(const CompareRequest& request) {
  require_single_process("compare");
  // Every run is checked before the first starts: a typo in the last combination must not
  // surface an hour into the comparison.
  auto [sweep, plan] = check_sweep(request.file, request.overrides);
  std::cout << fmt::format("{}: {} combination{} x {} round{} ({} scaling, base {}); every one valid\n",
                           request.file.string(), plan.combinations.size(), plan.combinations.size() == 1 ? "" : "s",
                           sweep.repeats, sweep.repeats == 1 ? "" : "s", sweep.scaling, sweep.base.string());
  for (const auto& s : plan.skipped) std::cout << "  not run: " << s << "\n";
  if (request.dry_run) {
    print_dry_run(sweep, plan);
    std::cout << "dry run: nothing was started\n";
    return 0;
  }

  const Json record_of_runs = comparison_json(request, plan);
  const bool resuming = !request.resume.empty();
  if (resuming) check_resumable(request.resume, record_of_runs);
  if (!resuming && !request.out.empty() && fs::exists(request.out / "results.json"))
    throw UsageError("directory " + request.out.string() + " already holds a comparison (results.json).",
                     "Go on with it with `--resume " + request.out.string() +
                         "` (runs that ended ok are kept), choose a new --out directory, or delete the old "
                         "comparison first.");
  const fs::path dir = make_run_directory(resuming ? request.resume : request.out, "runs", sweep.file.stem().string(),
                                          resuming ? RunDirUse::kContinue : RunDirUse::kNew);
  const auto lock = lock_run_directory(dir);  // one comparison at a time writes here
  if (!resuming) write_text_file(dir / kComparisonFile, record_of_runs.dump() + "\n");
  std::cout << (resuming ? "resuming: " : "outputs: ") << dir.string() << "  (tensorboard --logdir " << dir.string()
            << ")\n";
  Comparison comparison(std::move(sweep), std::move(plan), dir, resuming);
  const int interrupted = comparison.run_all();
  comparison.write_hparams_experiment();
  comparison.summarize();
  std::cout << "\n" << comparison.write_outputs();
  std::cout << fmt::format("results: {} (results.csv, results.json, results.md, report.html)\n", dir.string());
  const CompareRecord& record = comparison.record();
  if (request.estimate && !interrupted) estimate_beside(request, record);
  if (const auto& noise = record.aggregate.noise; !noise.empty()) {
    std::vector<std::string> what;
    for (const auto& f : noise) what.push_back(f.what.substr(0, f.what.find(" (")));
    std::cerr << fmt::format("strata: warning: runs of identical work differ by more than {:.0f}%: {} (the Noise section "
                             "of results.md names the runs and their figures); run more repeats\n",
                             100 * record.sweep->measure.noise_threshold, fmt::join(what, "; "));
  }
  if (!record.loose.empty())
    std::cerr << fmt::format("strata: warning: {}; still loose: {}\n",
                             record.stopped.empty() ? "the comparison ended before the auto-repeat mode" : record.stopped,
                             fmt::join(record.loose, ", "));
  if (interrupted) {
    std::cerr << "strata: the comparison was interrupted; the results hold the runs that finished\n";
    return 128 + interrupted;
  }
  if (const int failed = comparison.failed(); failed > 0) {
    std::cerr << fmt::format("strata: {} of {} runs failed (see the Notes of results.md and each run's output.log)\n",
                             failed, record.rows.size());
    return 1;
  }
  return 0;
}

}  // namespace strata
