#pragma once
// report.html: one self-contained page (inline SVG charts and CSS; no scripts, no network) about a
// set of runs: where they ran; steady-state step time, speedup, scaling efficiency, throughput and
// peak memory per rank against world size, each with its spread over repeats (min..max) and the
// results within noise of the baseline or suspect marked; memory per rank by part, communication,
// loss curves (one per series, repeats as a band), the step's time breakdown and FLOP/s when the
// summaries have them; then the tables of results.md. `strata compare` writes it next to
// results.md; `strata plot RUN_DIR...` builds it from run directories made separately.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "compare/stats.hpp"
#include "io/run_result.hpp"

namespace strata {

/// One run as the report and the tables show it.
struct ReportRun {
  /// The table row and the chart series: the strategy, then the sweep's other axes as ", key=value".
  std::string series;
  std::string label;   ///< the run's name, e.g. "ddp-w2-r1"
  std::string dir;     ///< its directory, as shown
  int world_size = 1;  ///< devices (ranks, or dp's replicas)
  RunResult result;    ///< status and summary.json
  std::optional<double> speedup, efficiency;  ///< against the baseline; none when not computable

  bool ok() const { return result.status == "ok"; }
  /// The number at a dotted path of summary.json; NaN when absent.
  double number(const std::string& path) const { return result.number(path); }
  /// Parameters + gradients + optimizer state + a strategy's named extra state held per rank, in bytes.
  double model_state_bytes() const;
  /// The strategy: the series up to its first ", ".
  std::string strategy() const { return series.substr(0, series.find(", ")); }
};

/// One series at one world size over its repeats: the figures the charts draw and the tables print,
/// each with its spread (stats.hpp: the comparisons use the range min..max).
struct ReportCell {
  std::string series;
  int world_size = 1;
  std::size_t runs = 0;             ///< runs of the cell, whatever their status
  std::size_t ok = 0;               ///< successful ones, which the spreads summarize
  bool steady = true;               ///< step_time_s is steady-state (false: older summaries, median step time)
  stats::Spread step_time_s;        ///< steady_step_time_s, in seconds (step_time_s when a summary lacks it)
  stats::Spread train_time_s;       ///< wall time of the training loop, in seconds
  stats::Spread samples_per_s;      ///< steady_samples_per_s (samples_per_s when a summary lacks it)
  stats::Spread peak_bytes;         ///< memory.peak_bytes: process peak (CPU) or allocator reserved (CUDA)
  stats::Spread peak_tensor_bytes;  ///< memory.peak_tensor_bytes: most live tensor bytes during steps
  /// Against the baseline (strong: baseline step time / step time; weak: throughput / baseline
  /// throughput), with the interval every pairing of runs allows; NaN fields without a baseline.
  stats::Interval speedup{NAN, NAN, NAN}, efficiency{NAN, NAN, NAN};
  bool is_baseline = false;                           ///< the baseline's own cell
  stats::Verdict verdict = stats::Verdict::kUnknown;  ///< against the baseline (kWithinNoise: not ranked)
  bool suspect = false;                               ///< efficiency above 100% beyond the noise
  /// Within noise of the baseline: worth a mark (the baseline itself is not marked).
  bool within_noise() const { return !is_baseline && verdict == stats::Verdict::kWithinNoise; }

  // Set by the aggregation (compare/aggregate.cpp: `strata compare`, aggregate_report()).
  std::vector<std::string> labels;  ///< its runs, by repeat
  std::string baseline;             ///< the cell it is measured against, "series@N"
  /// "suspect" (as `suspect`: above 100% beyond the noise band), "within noise of 100%" (above 100%
  /// by the median, inside the band), "" (at most 100%): an efficiency above 100% is never plain.
  std::string efficiency_flag;
  bool noisy = false;  ///< its repeats' steady step times spread beyond Report::noise_threshold
  /// Among the cells of its world size doing the same work (the axes other than strategy): 1 + those
  /// faster in every run; 0 without a successful run. Overlapping ranges are not ordered: a cell
  /// is never ranked below one it is within noise of (within_noise_of names them).
  int rank = 0;
  std::vector<std::string> within_noise_of;  ///< cells of that ranking whose ranges overlap its own ("series@N")
  /// "series@N".
  std::string name() const { return series + "@" + std::to_string(world_size); }
};

/// The warm-up run of a comparison: before the first round, discarded from every figure.
struct ReportWarmup {
  std::string combination;  ///< the run it warms up for (round 1's first), e.g. "ddp-w2-r1"
  std::string dir;          ///< its directory, as shown (it keeps its output.log only)
  std::int64_t steps = 0;
  std::string status;       ///< ok | failed | interrupted
  std::string error;
  double seconds = 0;       ///< wall time
};

/// A table as a grid: `grid[0]` is the header; `align` one letter per column ('l' or 'r'). A cell
/// "value (low–high)" carries its range over repeats (report.html draws it under the value).
struct ReportTable {
  std::string title;
  std::vector<std::vector<std::string>> grid;
  std::string align;
  std::string note;  ///< a line under the table (what its marks mean); may be empty
};

struct Report;

/// The tables of results.md: per series (rows) and world size (column groups), the median over
/// repeats, or the status word when no repeat succeeded. Time (steady step time, speedup and
/// efficiency with their ranges, ≈ within noise of the baseline, ! suspect; train time), memory and
/// communication, result; the step's time breakdown and FLOP/s when some summary has them.
std::vector<ReportTable> report_tables(const Report& report);

/// A note for each resumed run (more than one segment in its summary): its figures are its last
/// segment's, and the segments before it as "strategy@world (steps a-b)".
std::vector<std::string> resumed_notes(const std::vector<ReportRun>& runs);

/// Everything report.html shows.
struct Report {
  std::string title;               ///< e.g. "Comparison: sweep.toml"
  std::vector<std::string> facts;  ///< lines under the title (base experiment, repeats, ...)
  std::string scaling = "strong";  ///< strong: speedup = baseline time / time; weak: throughput ratio
  std::string baseline;            ///< the baseline, in words
  int baseline_world_size = 1;     ///< the ideal speedup at world size N is N / this
  std::string date;                ///< when the report was made, e.g. "2026-01-31 12:00 UTC"
  std::string machine;             ///< machine_description()
  /// The baseline's strategy: a series "S, k=v" is measured against the series of this strategy
  /// with the same ", k=v", at baseline_world_size. Empty: each series against itself there.
  std::string baseline_strategy;
  std::vector<ReportRun> runs;     ///< in order of appearance (series order follows it)
  std::vector<std::string> notes;  ///< failed runs, skipped combinations, caveats
  /// Figures per series and world size; empty: report_cells() aggregates `runs`.
  std::vector<ReportCell> cells;

  // How `strata compare` measured (empty for `strata plot`).
  std::vector<stats::NoiseFinding> noise;        ///< identical work that spread beyond noise_threshold
  double noise_threshold = 0.10;                 ///< relative range ([compare] noise_threshold)
  std::vector<std::vector<std::string>> rounds;  ///< each round's run labels, in the order they ran
  std::optional<ReportWarmup> warmup;            ///< the warm-up run, when there was one
  std::vector<std::string> loose;                ///< auto-repeat: cells left above until_tight, e.g. "ddp@2 (12%)"
};

struct Aggregate;  // compare/aggregate.hpp

/// The aggregation (compare/aggregate.hpp: spreads, intervals and verdicts against the baseline
/// cell, noise) of report.runs: a series "S, k=v" against the series of baseline_strategy with the
/// same ", k=v" at baseline_world_size. `strata plot` shows it.
Aggregate aggregate_report(const Report& report);

/// report.cells when set, else aggregate_report(report).cells.
std::vector<ReportCell> report_cells(const Report& report);

/// The colour of a strategy in every chart of every report: a fixed colour for the built-in
/// strategies, and for another name one of a second palette chosen by a hash of the name, so the
/// colour never depends on which strategies a report shows or in which order.
std::string strategy_color(const std::string& strategy);

/// The HTML text of the report.
std::string render_report(const Report& report);

/// "Intel(R) Xeon(R) ..., 2 cores": the CPU model and the cores this process may use.
std::string machine_description();

/// `strata plot RUN_DIR... [--out FILE] [--baseline DIR]`.
struct PlotRequest {
  std::vector<std::filesystem::path> runs;  ///< run directories, each with summary.json
  std::filesystem::path out;                ///< the HTML file (a directory: report.html in it); empty: ./report.html
  std::filesystem::path baseline;           ///< the baseline run; empty: the smallest world size, `single` first
};

/// Reads the runs' summaries, computes strong-scaling speedups against the baseline and writes
/// the report; returns its path. Throws UsageError (exit 2) naming a directory without a
/// readable summary.json.
std::filesystem::path plot_runs(const PlotRequest& request);

namespace detail {
/// "1.50 MiB", "312.4 MiB", "12 B"; "-" when not finite.
std::string bytes_text(double bytes);
/// `v` formatted with fmt `format` ("{:.2f}"); "-" when not finite.
std::string number_text(double v, const char* format);
}  // namespace detail

}  // namespace strata
