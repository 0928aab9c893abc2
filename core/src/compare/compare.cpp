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
#include "compare/sweep.hpp"
#include "config/experiment.hpp"
#include "io/json.hpp"
#include "io/run_result.hpp"
#include "io/run_dir.hpp"
#include "launch/child.hpp"
#include "train/median.hpp"
#include "run.hpp"
#include "strata/registry.hpp"
#include "text/suggest.hpp"
#include "text/table.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

/// What one run produced (from its summary.json, or its output when it failed early).
struct Row {
  const SweepRun* run = nullptr;
  RunResult result;  ///< status: ok | failed | interrupted | not run
  fs::path dir;
  std::optional<double> speedup, efficiency;

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
    for (std::size_t i = 0; i < n; ++i) {
      Row& row = rows_[i];
      const SweepRun& run = *row.run;
      row.dir = dir_ / run.label;
      std::vector<std::string> args = {"run", fs::absolute(sweep_.base).string(), "--out", row.dir.string()};
      for (const auto& o : run.overrides) args.insert(args.end(), {"--set", o});
      const std::string prefix = fmt::format("[{:>{}}/{}] {}", i + 1, std::to_string(n).size(), n, run.label);
      status_line(prefix + ": starting");
      const auto child = run_logged(args, row.dir, [&](const std::string& line) {
        if (line.rfind("step ", 0) == 0 || line.rfind("eval at", 0) == 0) status_line(prefix + ": " + line);
      });
      const auto& outcome = child.outcome;
      const double wall = child.seconds;
      row.result = read_run_result(row.dir);
      if (outcome.interrupted) {
        row.result.status = "interrupted";
        row.result.error = "the comparison was interrupted";
      } else if (outcome.exit_code != 0 || row.status() != "ok") {
        row.result.status = "failed";
        if (row.result.error.empty()) row.result.error = error_from_output(child.lines);
      }
      finish_line(row.status() == "ok"
                      ? fmt::format("{}: ok in {:.1f} s (train {:.2f} s, {:.0f} samples/s, final loss {:.4f})", prefix,
                                    wall, row.number("train_time_s"), row.number("samples_per_s"),
                                    row.number("final_loss"))
                      : fmt::format("{}: {} (exit {}): {}", prefix, row.status(), outcome.exit_code, row.result.error));
      if (outcome.interrupted) return outcome.interrupted;
    }
    return 0;
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

  std::string csv() const {
    const auto extra = extra_axes();
    std::string out = "strategy,world_size";
    for (const auto& k : extra) out += "," + csv_field(k);
    out += ",repeat,status,train_time_s,step_time_s,samples_per_s,speedup,efficiency,model_state_bytes,peak_bytes,"
           "peak_tensor_bytes,bus_bytes_per_step,final_loss,eval_accuracy,devices,params_bytes,grads_bytes,optimizer_bytes,"
           "payload_bytes_per_step,calls_per_step,comm_time_s,eval_loss,param_norm,run_dir,error\n";
    for (const auto& r : rows_) {
      out += csv_field(r.run->strategy) + "," + std::to_string(r.run->world_size);
      for (const auto& k : extra) out.append(",").append(csv_field(value_of(*r.run, k)));
      out += fmt::format(",{},{}", r.run->repeat, r.status());
      for (const char* path : {"train_time_s", "step_time_s", "samples_per_s"}) out += "," + csv_number(r.number(path));
      out += "," + csv_number(r.speedup.value_or(NAN)) + "," + csv_number(r.efficiency.value_or(NAN));
      out += "," + csv_number(r.model_state_bytes());
      for (const char* path : {"memory.peak_bytes", "memory.peak_tensor_bytes", "comm.bus_bytes_per_step", "final_loss", "eval.accuracy", "devices",
                               "memory.model_state_bytes.params", "memory.model_state_bytes.grads",
                               "memory.model_state_bytes.optimizer", "comm.payload_bytes_per_step", "comm.calls_per_step",
                               "comm.time_s", "eval.loss", "param_norm"})
        out.append(",").append(csv_number(r.number(path)));
      out += "," + csv_field(fs::relative(r.dir, dir_).string()) + "," + csv_field(r.result.error) + "\n";
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
      o["train_time_s"] = json_number(r.number("train_time_s"));
      o["step_time_s"] = json_number(r.number("step_time_s"));
      o["samples_per_s"] = json_number(r.number("samples_per_s"));
      o["speedup"] = json_number(r.speedup.value_or(NAN));
      o["efficiency"] = json_number(r.efficiency.value_or(NAN));
      o["model_state_bytes"] = json_number(r.model_state_bytes());
      o["peak_bytes"] = json_number(r.number("memory.peak_bytes"));
      o["peak_tensor_bytes"] = json_number(r.number("memory.peak_tensor_bytes"));
      o["bus_bytes_per_step"] = json_number(r.number("comm.bus_bytes_per_step"));
      o["final_loss"] = json_number(r.number("final_loss"));
      o["eval_accuracy"] = json_number(r.number("eval.accuracy"));
      o["run_dir"] = fs::relative(r.dir, dir_).string();
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

/// A ConfigError about run `label`, at the same position.
ConfigError in_run(const ConfigError& e, const std::string& label) {
  return ConfigError(e.where(), e.key(), "run " + label + ": " + e.what(), e.fix());
}

}  // namespace

int compare_strategies(const CompareRequest& request) {
  require_single_process("compare");
  Sweep sweep = parse_sweep(request.file, request.overrides);
  std::vector<std::string> set_texts;
  std::vector<SourceLocation> set_origins;
  for (const auto& o : sweep.set) {
    set_texts.push_back(o.key + "=" + o.toml);
    set_origins.push_back(o.where);
  }
  const Experiment base = load_experiment(sweep.base, set_texts, set_origins);
  Registry registry;
  load_registry(registry, &base);
  const SweepPlan plan = plan_sweep(sweep, registry, base.strategy.name, static_cast<int>(base.distributed.nproc),
                                    base.train.global_batch_size);

  // Every run is checked before the first starts: a typo in the last combination must not
  // surface an hour into the comparison.
  std::cout << fmt::format("{}: {} runs ({} scaling, base {}); validating\n", request.file.string(), plan.runs.size(),
                           sweep.scaling, sweep.base.string());
  for (const auto& run : plan.runs) {
    if (run.repeat > 1) continue;
    try {
      check_experiment(load_experiment(sweep.base, run.overrides, run.origins));
    } catch (const ConfigError& e) {
      throw in_run(e, run.label);
    }
  }
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
