// `strata compare`: validates a whole sweep, runs every combination as a real `strata run` (a
// child process each, so a crash or a failed rank costs one row, not the comparison), and writes
// results.csv, results.json, results.md and report.html next to the runs' own directories.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iostream>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "compare/report.hpp"
#include "compare/sweep_check.hpp"
#include "io/json.hpp"
#include "io/run_result.hpp"
#include "io/run_dir.hpp"
#include "launch/child.hpp"
#include "launch/verdict.hpp"
#include "train/median.hpp"
#include "run.hpp"
#include "strata/registry.hpp"
#include "tensorboard/event_writer.hpp"
#include "tensorboard/hparams.hpp"
#include "text/suggest.hpp"
#include "text/table.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

/// What one run produced (from its summary.json, or its output when it failed early).
struct Row {
  const SweepRun* run = nullptr;
  RunResult result;  ///< status: ok | failed | interrupted | not started; error: the cause
  fs::path dir;
  std::optional<double> speedup, efficiency;
  std::optional<std::int64_t> failed_rank;  ///< the rank that failed first, when the run says
  std::string signal;                       ///< "SIGKILL" when a rank (or the run) died by a signal

  const std::string& status() const { return result.status; }
  double number(const std::string& path) const { return result.number(path); }
  double model_state_bytes() const {
    return number("memory.model_state_bytes.params") + number("memory.model_state_bytes.grads") +
           number("memory.model_state_bytes.optimizer");
  }
};

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string(); }

Json json_number(double v) { return std::isfinite(v) ? Json(v) : Json(); }

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

/// Runs sharing everything but world size and repeat form one row of the tables.
std::string row_key(const SweepRun& run) {
  std::string key = run.strategy;
  for (const auto& [axis, display] : run.values)
    if (axis != "strategy" && axis != "world_size") key += ", " + axis.substr(axis.rfind('.') + 1) + "=" + display;
  return key;
}

class Comparison {
 public:
  Comparison(Sweep sweep, SweepPlan plan, fs::path dir) : sweep_(std::move(sweep)), plan_(std::move(plan)), dir_(std::move(dir)) {
    for (const auto& run : plan_.runs) {
      Row row;
      row.run = &run;
      rows_.push_back(std::move(row));
    }
    tty_ = isatty(STDOUT_FILENO) == 1;
  }

  /// Runs every combination; returns the signal that interrupted the comparison (0 if none).
  int run_all() {
    const std::size_t n = rows_.size();
    for (auto& row : rows_) {  // until a run starts, it has not
      row.dir = dir_ / row.run->label;
      row.result.status = "not started";
    }
    for (std::size_t i = 0; i < n; ++i) {
      Row& row = rows_[i];
      const SweepRun& run = *row.run;
      std::vector<std::string> args = {"run", fs::absolute(sweep_.base).string(), "--out", row.dir.string()};
      for (const auto& o : run.overrides) args.insert(args.end(), {"--set", o});
      const std::string prefix = fmt::format("[{:>{}}/{}] {}", i + 1, std::to_string(n).size(), n, run.label);
      status_line(prefix + ": starting");
      LoggedChild child;
      try {
        child = run_logged(args, row.dir, [&](const std::string& line) {
          if (line.rfind("step ", 0) == 0 || line.rfind("eval at", 0) == 0) status_line(prefix + ": " + line);
        });
      } catch (const std::exception& e) {  // no process (fork failed, no directory): the others may still run
        row.result.error = std::string("it could not be started: ") + e.what();
        finish_line(fmt::format("{}: not started: {}", prefix, row.result.error));
        continue;
      }
      record(row, child);
      finish_line(row.status() == "ok"
                      ? fmt::format("{}: ok in {:.1f} s (train {:.2f} s, {:.0f} samples/s, final loss {:.4f})", prefix,
                                    child.seconds, row.number("train_time_s"), row.number("samples_per_s"),
                                    row.number("final_loss"))
                      : fmt::format("{}: {} (exit {}): {}", prefix, row.status(), child.outcome.exit_code,
                                    row.result.error));
      if (const int sig = child.outcome.interrupted) {
        for (std::size_t j = i + 1; j < n; ++j)
          rows_[j].result.error = fmt::format("the comparison was interrupted ({}) before this run", signal_name(sig));
        return sig;
      }
    }
    return 0;
  }

  /// Writes the HPARAMS experiment of the comparison directory: TensorBoard then lists the sweep's
  /// axes (strategy and world size first) as differing, and the runs' summary figures as metrics.
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
    tb::EventWriter events(dir_);
    events.add_hparams_experiment(hparams, tb::summary_metrics(),
                                  "strata compare " + sweep_.file.string() + " (base " + sweep_.base.string() + ")");
  }

  void compute_speedups() {
    // Baseline time (strong) or throughput (weak) per row group: median over repeats.
    const bool weak = sweep_.scaling == "weak";
    for (auto& row : rows_) {
      if (row.status() != "ok") continue;
      auto values = row.run->values;
      for (auto& [key, display] : values)
        for (const auto& [bkey, bvalue] : sweep_.baseline)
          if (key == bkey) display = bvalue;
      std::vector<double> base_measure;
      int base_world = plan_.baseline_world_size;
      for (const auto& other : rows_)
        if (other.status() == "ok" && other.run->values == values) {
          base_measure.push_back(other.number(weak ? "samples_per_s" : "train_time_s"));
          base_world = other.run->world_size;
        }
      const double base = median(base_measure);
      const double own = row.number(weak ? "samples_per_s" : "train_time_s");
      if (!std::isfinite(base) || !std::isfinite(own) || own <= 0 || base <= 0) continue;
      row.speedup = weak ? own / base : base / own;
      row.efficiency = *row.speedup / (static_cast<double>(row.run->world_size) / base_world);
    }
  }

  /// Writes results.csv, results.json, results.md and report.html; returns results.md's text.
  std::string write_outputs() const {
    write_text_file(dir_ / "results.csv", csv());
    write_text_file(dir_ / "results.json", json().dump() + "\n");
    std::string md = markdown();
    write_text_file(dir_ / "results.md", md);
    write_text_file(dir_ / "report.html", render_report(report()));
    return md;
  }

  int failed() const {
    return static_cast<int>(std::count_if(rows_.begin(), rows_.end(), [](const Row& r) { return r.status() != "ok"; }));
  }

 private:
  void status_line(const std::string& text) {
    if (tty_) {
      std::string shown = text.size() > 118 ? text.substr(0, 117) + "…" : text;
      std::cout << "\r\033[K" << shown << std::flush;
    } else if (text.find(": starting") != std::string::npos) {
      std::cout << text << std::endl;
    }
  }
  void finish_line(const std::string& text) {
    std::cout << (tty_ ? "\r\033[K" : "") << text << std::endl;
  }

  /// The row of a run that ended: its own verdict (summary.json: status, error, failed_rank,
  /// signal) where it left one, else the cause its process's end tells.
  void record(Row& row, const LoggedChild& child) const {
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

  std::string markdown() const;
  Report report() const;

  /// The rows as the tables and report.html see them.
  std::vector<ReportRun> report_runs() const {
    std::vector<ReportRun> runs;
    for (const auto& r : rows_)
      runs.push_back({row_key(*r.run), r.run->label, r.run->label, r.run->world_size, r.result, r.speedup, r.efficiency});
    return runs;
  }

  /// Failed runs and skipped combinations, a line each.
  std::vector<std::string> notes() const {
    std::vector<std::string> out;
    for (const auto& r : rows_)
      if (r.status() != "ok") out.push_back(fmt::format("{} {}: {}", r.run->label, r.status(), r.result.error));
    for (const auto& s : plan_.skipped) out.push_back("not run: " + s);
    for (auto& note : resumed_notes(report_runs())) out.push_back(std::move(note));
    return out;
  }

  /// The baseline in words: "strategy single, world_size 1", or "first run".
  std::string baseline_text() const {
    std::string baseline;
    for (const auto& [k, v] : sweep_.baseline) baseline += (baseline.empty() ? "" : ", ") + k + " " + v;
    return baseline.empty() ? "first run" : baseline;
  }

  std::vector<std::string> extra_axes() const {
    std::vector<std::string> keys;
    for (const auto& axis : sweep_.axes)
      if (axis.key != "strategy" && axis.key != "world_size") keys.push_back(axis.key);
    return keys;
  }

  static std::string value_of(const SweepRun& run, const std::string& key) {
    for (const auto& [k, v] : run.values)
      if (k == key) return v;
    return {};
  }

  /// The run's summary figures (tb::summary_figures(): the columns TensorBoard's summary/* scalars
  /// are named after), NaN without a summary.
  static double figure(const Row& r, const tb::SummaryFigure& f) {
    return r.result.summary ? tb::figure_value(*r.result.summary, f) : NAN;
  }

  /// Process segments of the run (more than one: resumed; its figures are the last one's), "" without a summary.
  static std::string segments_count(const Row& r) {
    return r.result.segments.empty() ? std::string() : std::to_string(r.result.segments.size());
  }

  std::string csv() const {
    const auto extra = extra_axes();
    const auto& figures = tb::summary_figures();
    std::string out = "strategy,world_size";
    for (const auto& k : extra) out += "," + csv_field(k);
    out += ",repeat,status,segments";
    // The figures in order, with speedup and efficiency (the comparison's own) after the throughput.
    for (const auto& f : figures) out.append(",").append(f.name).append(f.name == std::string("samples_per_s") ? ",speedup,efficiency" : "");
    out += ",run_dir,failed_rank,signal,error\n";
    for (const auto& r : rows_) {
      out += csv_field(r.run->strategy) + "," + std::to_string(r.run->world_size);
      for (const auto& k : extra) out.append(",").append(csv_field(value_of(*r.run, k)));
      out += fmt::format(",{},{},{}", r.run->repeat, csv_field(r.status()), segments_count(r));
      for (const auto& f : figures) {
        out += "," + csv_number(figure(r, f));
        if (f.name == std::string("samples_per_s"))
          out += "," + csv_number(r.speedup.value_or(NAN)) + "," + csv_number(r.efficiency.value_or(NAN));
      }
      out += "," + csv_field(fs::relative(r.dir, dir_).string()) + "," +
             (r.failed_rank ? std::to_string(*r.failed_rank) : std::string()) + "," + csv_field(r.signal) + "," +
             csv_field(r.result.error) + "\n";
    }
    return out;
  }

  Json json() const {
    Json j = Json::object();
    j["sweep"] = sweep_.file.string();
    j["base"] = sweep_.base.string();
    j["scaling"] = sweep_.scaling;
    j["repeats"] = sweep_.repeats;
    Json& b = j["baseline"];
    b = Json::object();
    for (const auto& [k, v] : sweep_.baseline) b[k] = v;
    j["machine"] = machine_;
    j["date"] = date_;
    Json skipped = Json::array();
    for (const auto& s : plan_.skipped) skipped.push_back(s);
    j["skipped"] = skipped;
    Json runs = Json::array();
    for (const auto& r : rows_) {
      Json o = Json::object();
      o["strategy"] = r.run->strategy;
      o["world_size"] = r.run->world_size;
      Json& axes = o["axes"];
      axes = Json::object();
      for (const auto& [k, v] : r.run->values) axes[k] = v;
      o["repeat"] = r.run->repeat;
      o["status"] = r.status();
      o["segments"] = r.result.segments.empty() ? Json() : Json(static_cast<std::int64_t>(r.result.segments.size()));
      for (const auto& f : tb::summary_figures()) {
        o[f.name] = json_number(figure(r, f));
        if (f.name == std::string("samples_per_s")) {
          o["speedup"] = json_number(r.speedup.value_or(NAN));
          o["efficiency"] = json_number(r.efficiency.value_or(NAN));
        }
      }
      o["run_dir"] = fs::relative(r.dir, dir_).string();
      o["failed_rank"] = r.failed_rank ? Json(*r.failed_rank) : Json();
      o["signal"] = r.signal.empty() ? Json() : Json(r.signal);
      if (!r.result.error.empty()) o["error"] = r.result.error;
      o["summary"] = r.result.summary.value_or(Json());
      runs.push_back(std::move(o));
    }
    j["runs"] = runs;
    return j;
  }

  Sweep sweep_;
  SweepPlan plan_;
  fs::path dir_;
  std::vector<Row> rows_;
  bool tty_ = false;
  std::string date_ = utc_time("%Y-%m-%d %H:%M UTC");
  std::string machine_ = machine_description();
};

std::string Comparison::markdown() const {
  std::string out = fmt::format("## Comparison: {}\n\n", sweep_.file.filename().string());
  out += fmt::format("- base experiment: `{}`; {} scaling; baseline: {}; {} repeat{} (medians shown)\n",
                     sweep_.base.filename().string(), sweep_.scaling, baseline_text(), sweep_.repeats,
                     sweep_.repeats > 1 ? "s" : "");
  out += fmt::format("- machine: {}; {}\n", machine_, date_);
  out += "- `@N`: world size N (ranks, or dp's replicas in one process). Speedup = baseline time / time "
         "(weak scaling: throughput / baseline throughput); efficiency = speedup / (N / baseline N).\n\n";
  for (const auto& t : report_tables(report_runs()))
    out += fmt::format("### {}\n\n{}\n", t.title, detail::markdown_table(t.grid, t.align));
  std::string lines;
  for (const auto& n : notes()) lines += "- " + n + "\n";
  if (!lines.empty()) out += "### Notes\n\n" + lines + "\n";
  return out;
}

Report Comparison::report() const {
  Report r;
  r.title = "Comparison: " + sweep_.file.filename().string();
  r.facts = {"sweep: " + sweep_.file.string(), "base experiment: " + sweep_.base.string(),
             fmt::format("repeats: {} (medians shown)", sweep_.repeats)};
  r.scaling = sweep_.scaling;
  r.baseline = baseline_text();
  r.baseline_world_size = plan_.baseline_world_size;
  r.date = date_;
  r.machine = machine_;
  r.runs = report_runs();
  r.notes = notes();
  return r;
}

}  // namespace

int compare_strategies(const CompareRequest& request) {
  require_single_process("compare");
  // Every run is checked before the first starts: a typo in the last combination must not
  // surface an hour into the comparison.
  auto [sweep, plan] = check_sweep(request.file, request.overrides);
  std::cout << fmt::format("{}: {} run{} ({} scaling, base {}); every one valid\n", request.file.string(),
                           plan.runs.size(), plan.runs.size() == 1 ? "" : "s", sweep.scaling, sweep.base.string());
  for (const auto& s : plan.skipped) std::cout << "  not run: " << s << "\n";
  if (request.dry_run) {
    for (const auto& run : plan.runs) {
      std::string sets;
      for (const auto& o : run.overrides) sets += " --set " + o;
      std::cout << fmt::format("  {}: strata run {}{}\n", run.label, sweep.base.string(), sets);
    }
    std::cout << "dry run: nothing was started\n";
    return 0;
  }

  if (!request.out.empty() && fs::exists(request.out / "results.json"))
    throw UsageError("directory " + request.out.string() + " already holds a comparison (results.json).",
                     "Choose a new --out directory, or delete the old comparison first.");
  const fs::path dir = make_run_directory(request.out, "runs", sweep.file.stem().string());
  std::cout << "outputs: " << dir.string() << "  (tensorboard --logdir " << dir.string() << ")\n";
  Comparison comparison(std::move(sweep), plan, dir);
  comparison.write_hparams_experiment();
  const int interrupted = comparison.run_all();
  comparison.compute_speedups();
  std::cout << "\n" << comparison.write_outputs();
  std::cout << fmt::format("results: {} (results.csv, results.json, results.md, report.html)\n", dir.string());
  if (interrupted) {
    std::cerr << "strata: the comparison was interrupted; the results hold the runs that finished\n";
    return 128 + interrupted;
  }
  if (const int failed = comparison.failed(); failed > 0) {
    std::cerr << fmt::format("strata: {} of {} runs failed (see the Notes of results.md and each run's output.log)\n",
                             failed, plan.runs.size());
    return 1;
  }
  return 0;
}

}  // namespace strata
