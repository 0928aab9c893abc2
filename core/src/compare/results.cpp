// results.csv, results.json, results.md and the Report of a comparison. A run's row holds its own
// figures and, repeated on each row of its combination, the combination's spreads over repeats
// (`_min`, `_median`, `_max`), speedup and efficiency intervals and verdicts: one file a
// spreadsheet or pandas reads whole, no second kind of row.

#include "compare/results.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "tensorboard/hparams.hpp"
#include "text/table.hpp"

namespace strata {

namespace fs = std::filesystem;

std::string series_of(const SweepRun& run) { return run.strategy + work_of(run); }

std::string work_of(const SweepRun& run) {
  std::string key;
  for (const auto& [axis, display] : run.values)
    if (axis != "strategy" && axis != "world_size") key += ", " + axis.substr(axis.rfind('.') + 1) + "=" + display;
  return key;
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string(); }

Json json_number(double v) { return std::isfinite(v) ? Json(v) : Json(); }

/// A timing or memory figure of a run, spread over its combination's successful repeats.
struct SpreadFigure {
  const char* name;  ///< the column prefix: NAME_min, NAME_median, NAME_max
  std::function<double(const CompareRow&)> value;
};

const std::vector<SpreadFigure>& spread_figures() {
  static const std::vector<SpreadFigure> figures{
      {"steady_step_time_s", [](const CompareRow& r) { return r.result.step_timing().step_time_s; }},
      {"steady_samples_per_s", [](const CompareRow& r) { return r.result.step_timing().samples_per_s; }},
      {"train_time_s", [](const CompareRow& r) { return r.number("train_time_s"); }},
      {"step_time_s", [](const CompareRow& r) { return r.number("step_time_s"); }},
      {"samples_per_s", [](const CompareRow& r) { return r.number("samples_per_s"); }},
      {"comm_time_s", [](const CompareRow& r) { return r.number("comm.time_s"); }},
      {"peak_bytes", [](const CompareRow& r) { return r.number("memory.peak_bytes"); }},
      {"peak_tensor_bytes", [](const CompareRow& r) { return r.number("memory.peak_tensor_bytes"); }},
  };
  return figures;
}

/// The rows of `row`'s combination.
std::vector<const CompareRow*> combination_rows(const CompareRecord& rec, const CompareRow& row) {
  std::vector<const CompareRow*> out;
  for (const auto& r : rec.rows)
    if (r.run.combination == row.run.combination) out.push_back(&r);
  return out;
}

stats::Spread spread_of(const std::vector<const CompareRow*>& rows, const SpreadFigure& f) {
  std::vector<double> values;
  for (const auto* r : rows)
    if (r->status() == "ok") values.push_back(f.value(*r));
  return stats::spread(values);
}

const ReportCell* cell_of(const CompareRecord& rec, const SweepRun& run) {
  for (const auto& c : rec.aggregate.cells)
    if (c.series == series_of(run) && c.world_size == run.world_size) return &c;
  return nullptr;
}

std::string vs_baseline(const ReportCell& c) {
  if (c.is_baseline) return "baseline";
  return stats::verdict_name(c.verdict);
}

std::string joined(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : separator) + i;
  return out;
}

std::vector<std::string> extra_axes(const Sweep& sweep) {
  std::vector<std::string> keys;
  for (const auto& axis : sweep.axes)
    if (axis.key != "strategy" && axis.key != "world_size") keys.push_back(axis.key);
  return keys;
}

std::string value_of(const SweepRun& run, const std::string& key) {
  for (const auto& [k, v] : run.values)
    if (k == key) return v;
  return {};
}

/// The run's summary figures (tb::summary_figures(): the columns TensorBoard's summary/* scalars
/// are named after), NaN without a summary.
double summary_figure_value(const CompareRow& r, const tb::SummaryFigure& f) {
  return r.result.summary ? tb::figure_value(*r.result.summary, f) : NAN;
}

/// Process segments of the run (more than one: resumed; its figures are the last one's), "" without a summary.
std::string segments_count(const CompareRow& r) {
  return r.result.segments.empty() ? std::string() : std::to_string(r.result.segments.size());
}

/// The baseline in words: "strategy single, world_size 1", or "first run".
std::string baseline_text(const Sweep& sweep) {
  std::string baseline;
  for (const auto& [k, v] : sweep.baseline) baseline += (baseline.empty() ? "" : ", ") + k + " " + v;
  return baseline.empty() ? "first run" : baseline;
}

/// Decimals that show three significant digits of `v` (at least 0).
int decimals(double v) {
  return std::isfinite(v) && v != 0 ? std::max(0, 2 - static_cast<int>(std::floor(std::log10(std::fabs(v))))) : 0;
}

/// "12.3 ms": three significant digits.
std::string ms(double seconds) {
  return std::isfinite(seconds) ? fmt::format("{:.{}f} ms", 1e3 * seconds, decimals(1e3 * seconds)) : "-";
}

/// "12.3 ms (11.9–13.0)": the median and the range over repeats, with the median's decimals.
std::string ms_spread(const stats::Spread& s) {
  if (s.n == 0) return "-";
  if (s.n == 1) return ms(s.median);
  const int d = decimals(1e3 * s.median);
  return fmt::format("{} ({:.{}f}–{:.{}f})", ms(s.median), 1e3 * s.min, d, 1e3 * s.max, d);
}

std::vector<ReportRun> report_runs(const CompareRecord& rec) {
  std::vector<ReportRun> runs;
  for (const auto& r : rec.rows)
    runs.push_back({series_of(r.run), r.run.label, r.run.label, r.run.world_size, r.result, r.speedup, r.efficiency});
  return runs;
}

/// Failed runs, skipped combinations, resumed runs and older summaries, a line each.
std::vector<std::string> notes(const CompareRecord& rec) {
  std::vector<std::string> out;
  for (const auto& r : rec.rows)
    if (r.status() != "ok") out.push_back(fmt::format("{} {}: {}", r.run.label, r.status(), r.result.error));
  for (const auto& s : rec.plan->skipped) out.push_back("not run: " + s);
  if (!rec.kept.empty())
    out.push_back(fmt::format("resumed (--resume): {} run{} kept from an earlier session of this comparison, measured "
                              "then: {}", rec.kept.size(), rec.kept.size() == 1 ? "" : "s", joined(rec.kept)));
  for (auto& note : resumed_notes(report_runs(rec))) out.push_back(std::move(note));
  if (!rec.aggregate.not_steady.empty())
    out.push_back("no steady_step_time_s in the summary of " + joined(rec.aggregate.not_steady) +
                  " (older runs): their step_time_s, the median of every step including the first, stands in");
  return out;
}

/// The lines under the title: how the runs were measured.
std::vector<std::string> measurement_lines(const CompareRecord& rec) {
  const Sweep& sweep = *rec.sweep;
  std::vector<std::string> lines;
  const std::size_t combinations = rec.plan->combinations.size();
  const std::size_t rounds = rec.rounds.size();
  lines.push_back(fmt::format(
      "measured: {} round{} of {} combination{}, round r of every combination before round r + 1, {}", rounds,
      rounds == 1 ? "" : "s", combinations, combinations == 1 ? "" : "s",
      sweep.measure.shuffle ? fmt::format("each round in a shuffled order (seed {}; results.json `rounds`)", sweep.measure.seed)
                            : std::string("each round in the sweep's order (shuffle = false)")));
  if (rec.warmup)
    lines.push_back(fmt::format("warm-up run: {} steps of {} before the first round ({} in {:.1f} s), discarded from "
                                "every figure",
                                rec.warmup->steps, rec.warmup->combination, rec.warmup->status, rec.warmup->seconds));
  std::vector<std::string> warm;
  for (const auto& r : rec.rows)
    if (r.status() == "ok")
      if (const double w = r.number("timing_warmup_steps"); std::isfinite(w)) {
        const std::string text = fmt::format("{:g}", w);
        if (std::find(warm.begin(), warm.end(), text) == warm.end()) warm.push_back(text);
      }
  lines.push_back(fmt::format("timings: steady state, each run's median step time after its first {} steps "
                              "(`[train] timing_warmup_steps`); median (min–max) over the repeats; two results whose "
                              "ranges overlap are within noise, not ranked; train time (every step) is shown, never "
                              "divided",
                              warm.empty() ? std::string("few") : joined(warm, " or ")));
  // Threads per rank, as the runs report them, by world size.
  std::map<int, std::vector<std::string>> threads;
  for (const auto& r : rec.rows)
    if (const double t = r.number("threads"); std::isfinite(t) && t > 0) {
      auto& seen = threads[r.run.world_size];
      const std::string text = fmt::format("{:g}", t);
      if (std::find(seen.begin(), seen.end(), text) == seen.end()) seen.push_back(text);
    }
  if (!threads.empty()) {
    std::vector<std::string> by_world;
    for (const auto& [world, values] : threads) by_world.push_back(fmt::format("@{} {}", world, joined(values, " or ")));
    lines.push_back("intra-op threads per rank (summary.json `threads`): " + joined(by_world));
  }
  if (rec.plan->rank_threads > 0)
    lines.push_back(fmt::format(
        "CPU threads: every rank computes with {0} thread{1} at every world size ([compare] cpu_threads = \"equal\"; "
        "this host has {2}), so a run of N ranks uses N x {0}, as N GPUs each bring their own compute. Unlike GPUs, "
        "the ranks of one host share its caches and memory bandwidth, and their collectives take cores from the "
        "compute: CPU speedups measure the strategies' overheads on shared hardware, not the scaling a GPU cluster "
        "would show",
        rec.plan->rank_threads, rec.plan->rank_threads == 1 ? "" : "s", rec.plan->host_threads));
  else if (sweep.measure.cpu_threads == "share" && !threads.empty())
    lines.push_back("CPU threads: the host's threads are divided among each run's ranks ([compare] cpu_threads = "
                    "\"share\"): smaller world sizes compute with more threads per rank, so their speedups mix thread "
                    "counts with the strategies' own costs");
  if (sweep.auto_repeat())
    lines.push_back(fmt::format("auto-repeat: {}{}{}", sweep.measure.until_tight > 0
                                    ? fmt::format("until every relative range is at most {:g}, ", sweep.measure.until_tight)
                                    : std::string(),
                                fmt::format("at most {} rounds", sweep.max_rounds()),
                                sweep.measure.budget_s > 0 ? fmt::format(", within {:g} s", sweep.measure.budget_s) : ""));
  return lines;
}

/// The ranking of each world size (cells doing the same work), "within noise" where ranges overlap.
ReportTable ranking_table(const CompareRecord& rec) {
  ReportTable t{"Ranking by steady step time", {{"world", "strategy", "steady step", "rank"}}, "rlrl", {}};
  std::vector<const ReportCell*> cells;
  for (const auto& c : rec.aggregate.cells)
    if (c.ok > 0) cells.push_back(&c);
  std::stable_sort(cells.begin(), cells.end(), [](const ReportCell* a, const ReportCell* b) {
    return a->world_size != b->world_size ? a->world_size < b->world_size
           : a->rank != b->rank          ? a->rank < b->rank
                                         : a->step_time_s.median < b->step_time_s.median;
  });
  for (const auto* c : cells) {
    std::string rank = std::to_string(c->rank);
    if (!c->within_noise_of.empty()) rank += ", within noise of " + joined(c->within_noise_of);
    t.grid.push_back({std::to_string(c->world_size), c->series, ms_spread(c->step_time_s), rank});
  }
  t.note = "rank = 1 + the strategies of the same world size (and other axes) faster in every run; ranges that overlap "
           "are within noise of each other and share no order.";
  return t;
}

}  // namespace

std::vector<std::string> noise_lines(const CompareRecord& rec) {
  std::vector<std::string> lines;
  const double threshold = rec.sweep->measure.noise_threshold;
  for (const auto& f : rec.aggregate.noise) {
    std::string members;
    for (const auto& [label, value] : f.members) members += (members.empty() ? "" : ", ") + label + " " + ms(value);
    lines.push_back(fmt::format("warning: {} differ by {:.0f}% of their median (above {:.0f}%): {}{}", f.what,
                                100 * f.relative_range, 100 * threshold, members, f.note.empty() ? "" : "; " + f.note));
  }
  if (!lines.empty())
    lines.push_back(fmt::format(
        "runs that should take the same time differ by more than {:.0f}%: differences of that size between "
        "strategies are not results here. Run more repeats (`--set compare.repeats={}`, or `--until-tight {:g}`), "
        "on a quieter machine.",
        100 * threshold, std::max<std::int64_t>(2 * rec.sweep->repeats, 5), threshold));
  return lines;
}

std::string results_csv(const CompareRecord& rec) {
  const auto extra = extra_axes(*rec.sweep);
  const auto& figures = tb::summary_figures();
  std::string out = "strategy,world_size,threads";
  for (const auto& k : extra) out += "," + csv_field(k);
  out += ",repeat,order,status,segments";
  // The figures in order, with speedup and efficiency (the comparison's own) after the throughput.
  for (const auto& f : figures) out.append(",").append(f.name).append(f.name == std::string("samples_per_s") ? ",speedup,efficiency" : "");
  out += ",steady_step_time_s,steady_samples_per_s,timing";
  for (const auto& f : spread_figures()) out += fmt::format(",{0}_min,{0}_median,{0}_max", f.name);
  out += ",speedup_min,speedup_median,speedup_max,efficiency_min,efficiency_median,efficiency_max,efficiency_flag,"
         "vs_baseline,rank,within_noise_of,steady_step_time_s_relative_range,noisy";
  out += ",run_dir,failed_rank,signal,error\n";
  for (const auto& r : rec.rows) {
    out += csv_field(r.run.strategy) + "," + std::to_string(r.run.world_size) + ",";
    out += csv_number(r.number("threads"));
    for (const auto& k : extra) out.append(",").append(csv_field(value_of(r.run, k)));
    out += fmt::format(",{},{},{},{}", r.run.repeat, r.order ? std::to_string(r.order) : std::string(),
                       csv_field(r.status()), segments_count(r));
    // append(), not "," + text: GCC 12 warns (-Wrestrict) about the temporary string of the latter.
    const auto number = [&](double v) { out.append(",").append(csv_number(v)); };
    for (const auto& f : figures) {
      number(summary_figure_value(r, f));
      if (f.name == std::string("samples_per_s")) {
        number(r.speedup.value_or(NAN));
        number(r.efficiency.value_or(NAN));
      }
    }
    const StepTiming t = r.result.step_timing();
    number(t.step_time_s);
    number(t.samples_per_s);
    out.append(",").append(r.result.summary ? (t.steady ? "steady" : "step_time_s") : "");
    const auto group = combination_rows(rec, r);
    for (const auto& f : spread_figures()) {
      const auto s = spread_of(group, f);
      number(s.min);
      number(s.median);
      number(s.max);
    }
    if (const ReportCell* c = cell_of(rec, r.run)) {
      out += fmt::format(",{},{},{},{},{},{},{},{},{},{},{},{}", csv_number(c->speedup.low), csv_number(c->speedup.point),
                         csv_number(c->speedup.high), csv_number(c->efficiency.low), csv_number(c->efficiency.point),
                         csv_number(c->efficiency.high), csv_field(c->efficiency_flag), csv_field(vs_baseline(*c)),
                         c->rank ? std::to_string(c->rank) : std::string(), csv_field(joined(c->within_noise_of, " ")),
                         csv_number(c->step_time_s.relative_range()), c->noisy ? "true" : "false");
    } else {
      out += std::string(12, ',');
    }
    out += "," + csv_field(fs::relative(r.dir, rec.dir).string()) + "," +
           (r.failed_rank ? std::to_string(*r.failed_rank) : std::string()) + "," + csv_field(r.signal) + "," +
           csv_field(r.result.error) + "\n";
  }
  return out;
}

namespace {

Json spread_json(const stats::Spread& s) {
  Json o = Json::object();
  o["min"] = json_number(s.min);
  o["q1"] = json_number(s.q1);
  o["median"] = json_number(s.median);
  o["q3"] = json_number(s.q3);
  o["max"] = json_number(s.max);
  o["n"] = static_cast<std::int64_t>(s.n);
  return o;
}

Json interval_json(const stats::Interval& i) {
  Json o = Json::object();
  o["min"] = json_number(i.low);
  o["median"] = json_number(i.point);
  o["max"] = json_number(i.high);
  return o;
}

Json strings_json(const std::vector<std::string>& items) {
  Json a = Json::array();
  for (const auto& i : items) a.push_back(i);
  return a;
}

Json combination_json(const CompareRecord& rec, const SweepRun& run) {
  Json o = Json::object();
  o["name"] = series_of(run) + "@" + std::to_string(run.world_size);
  o["strategy"] = run.strategy;
  o["world_size"] = run.world_size;
  Json& axes = o["axes"];
  axes = Json::object();
  for (const auto& [k, v] : run.values) axes[k] = v;
  const ReportCell* c = cell_of(rec, run);
  if (!c) return o;
  o["runs"] = strings_json(c->labels);
  o["ok"] = static_cast<std::int64_t>(c->ok);
  o["timing"] = c->steady ? "steady" : "step_time_s";
  std::vector<const CompareRow*> group;
  for (const auto& r : rec.rows)
    if (r.run.combination == run.combination) group.push_back(&r);
  for (const auto& f : spread_figures()) o[f.name] = spread_json(spread_of(group, f));
  o["baseline"] = c->baseline;
  o["speedup"] = interval_json(c->speedup);
  o["efficiency"] = interval_json(c->efficiency);
  o["efficiency_flag"] = c->efficiency_flag;
  o["vs_baseline"] = vs_baseline(*c);
  o["rank"] = c->rank ? Json(c->rank) : Json();
  o["within_noise_of"] = strings_json(c->within_noise_of);
  o["steady_step_time_s_relative_range"] = json_number(c->step_time_s.relative_range());
  o["noisy"] = c->noisy;
  return o;
}

}  // namespace

Json results_json(const CompareRecord& rec) {
  const Sweep& sweep = *rec.sweep;
  Json j = Json::object();
  j["sweep"] = sweep.file.string();
  j["base"] = sweep.base.string();
  j["scaling"] = sweep.scaling;
  j["repeats"] = sweep.repeats;
  j["seed"] = sweep.measure.seed;
  j["shuffle"] = sweep.measure.shuffle;
  j["noise_threshold"] = sweep.measure.noise_threshold;
  j["until_tight"] = sweep.measure.until_tight;
  j["max_repeats"] = sweep.measure.max_repeats;
  j["budget_s"] = sweep.measure.budget_s;
  Json& b = j["baseline"];
  b = Json::object();
  for (const auto& [k, v] : sweep.baseline) b[k] = v;
  j["machine"] = rec.machine;
  j["date"] = rec.date;
  j["skipped"] = strings_json(rec.plan->skipped);
  if (rec.warmup) {
    Json w = Json::object();
    w["combination"] = rec.warmup->combination;
    w["run_dir"] = rec.warmup->dir;
    w["steps"] = rec.warmup->steps;
    w["status"] = rec.warmup->status;
    if (!rec.warmup->error.empty()) w["error"] = rec.warmup->error;
    w["seconds"] = rec.warmup->seconds;
    w["discarded"] = true;
    j["warmup"] = w;
  } else {
    j["warmup"] = Json();
  }
  Json rounds = Json::array();
  for (const auto& r : rec.rounds) rounds.push_back(strings_json(r));
  j["rounds"] = rounds;
  j["stopped"] = rec.stopped.empty() ? Json() : Json(rec.stopped);
  j["loose"] = strings_json(rec.loose);
  Json noise = Json::array();
  for (const auto& f : rec.aggregate.noise) {
    Json o = Json::object();
    o["what"] = f.what;
    o["relative_range"] = json_number(f.relative_range);
    if (!f.note.empty()) o["note"] = f.note;
    Json members = Json::array();
    for (const auto& [label, value] : f.members) {
      Json m = Json::object();
      m["label"] = label;
      m["steady_step_time_s"] = json_number(value);
      members.push_back(m);
    }
    o["members"] = members;
    noise.push_back(o);
  }
  j["noise"] = noise;
  Json combinations = Json::array();
  for (const auto& c : rec.plan->combinations) combinations.push_back(combination_json(rec, c));
  j["combinations"] = combinations;
  Json runs = Json::array();
  for (const auto& r : rec.rows) {
    Json o = Json::object();
    o["strategy"] = r.run.strategy;
    o["world_size"] = r.run.world_size;
    Json& axes = o["axes"];
    axes = Json::object();
    for (const auto& [k, v] : r.run.values) axes[k] = v;
    o["combination"] = series_of(r.run) + "@" + std::to_string(r.run.world_size);
    o["repeat"] = r.run.repeat;
    o["order"] = r.order ? Json(r.order) : Json();
    o["status"] = r.status();
    o["segments"] = r.result.segments.empty() ? Json() : Json(static_cast<std::int64_t>(r.result.segments.size()));
    for (const auto& f : tb::summary_figures()) {
      o[f.name] = json_number(summary_figure_value(r, f));
      if (f.name == std::string("samples_per_s")) {
        o["speedup"] = json_number(r.speedup.value_or(NAN));
        o["efficiency"] = json_number(r.efficiency.value_or(NAN));
      }
    }
    const StepTiming t = r.result.step_timing();
    o["steady_step_time_s"] = json_number(t.step_time_s);
    o["steady_samples_per_s"] = json_number(t.samples_per_s);
    o["timing"] = r.result.summary ? Json(t.steady ? "steady" : "step_time_s") : Json();
    o["run_dir"] = fs::relative(r.dir, rec.dir).string();
    o["failed_rank"] = r.failed_rank ? Json(*r.failed_rank) : Json();
    o["signal"] = r.signal.empty() ? Json() : Json(r.signal);
    if (!r.result.error.empty()) o["error"] = r.result.error;
    o["summary"] = r.result.summary.value_or(Json());
    runs.push_back(std::move(o));
  }
  j["runs"] = runs;
  return j;
}

Report comparison_report(const CompareRecord& rec) {
  const Sweep& sweep = *rec.sweep;
  Report r;
  r.title = "Comparison: " + sweep.file.filename().string();
  r.facts = {"sweep: " + sweep.file.string(), "base experiment: " + sweep.base.string()};
  for (auto& line : measurement_lines(rec)) r.facts.push_back(std::move(line));
  r.scaling = sweep.scaling;
  r.baseline = baseline_text(sweep);
  r.baseline_world_size = rec.plan->baseline_world_size;
  for (const auto& [k, v] : sweep.baseline)
    if (k == "strategy") r.baseline_strategy = v;
  r.date = rec.date;
  r.machine = rec.machine;
  r.runs = report_runs(rec);
  r.notes = notes(rec);
  r.cells = rec.aggregate.cells;
  r.noise = rec.aggregate.noise;
  r.noise_threshold = sweep.measure.noise_threshold;
  r.rounds = rec.rounds;
  r.warmup = rec.warmup;
  r.loose = rec.loose;
  return r;
}

std::string results_markdown(const CompareRecord& rec) {
  const Sweep& sweep = *rec.sweep;
  std::string out = fmt::format("## Comparison: {}\n\n", sweep.file.filename().string());
  out += fmt::format("- base experiment: `{}`; {} scaling; baseline: {}\n", sweep.base.filename().string(), sweep.scaling,
                     baseline_text(sweep));
  for (const auto& line : measurement_lines(rec)) out += "- " + line + "\n";
  out += fmt::format("- machine: {}; {}\n", rec.machine, rec.date);
  out += "- `@N`: world size N (ranks, or dp's replicas in one process). Speedup = baseline steady step time / steady "
         "step time (weak scaling: throughput / baseline throughput); efficiency = speedup / (N / baseline N); their "
         "ranges pair every run with every run of the baseline.\n\n";
  const Report report = comparison_report(rec);
  for (const auto& t : report_tables(report)) {
    out += fmt::format("### {}\n\n{}", t.title, detail::markdown_table(t.grid, t.align));
    out += t.note.empty() ? "\n" : "\n" + t.note + "\n\n";
  }
  if (std::any_of(rec.aggregate.cells.begin(), rec.aggregate.cells.end(), [](const ReportCell& c) { return c.ok > 0; })) {
    const auto t = ranking_table(rec);
    out += fmt::format("### {}\n\n{}\n{}\n\n", t.title, detail::markdown_table(t.grid, t.align), t.note);
  }
  std::string noise;
  for (const auto& line : noise_lines(rec)) noise += "- " + line + "\n";
  if (noise.empty())
    noise = fmt::format("- identical work agreed within {:.0f}%: the repeats of each combination, and the world-size-1 "
                        "runs of the same work\n",
                        100 * sweep.measure.noise_threshold);
  out += "### Noise\n\n" + noise + "\n";
  if (!rec.stopped.empty()) {
    out += "### Auto-repeat\n\n- " + rec.stopped + "\n";
    if (!rec.loose.empty()) out += "- still loose: " + joined(rec.loose) + "\n";
    out += "\n";
  }
  std::string lines;
  for (const auto& n : notes(rec)) lines += "- " + n + "\n";
  if (!lines.empty()) out += "### Notes\n\n" + lines + "\n";
  return out;
}

}  // namespace strata
