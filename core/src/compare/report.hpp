#pragma once
// report.html: one self-contained page (inline SVG charts and CSS; no scripts, no network) about a
// set of runs: where they ran, time, speedup and scaling efficiency against world size, memory per
// rank by part, communication, loss curves, the step's time breakdown and FLOP/s when the
// summaries have them, then the tables of results.md. `strata compare` writes it next to
// results.md; `strata plot RUN_DIR...` builds it from run directories made separately.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/run_result.hpp"

namespace strata {

/// One run as the report and the tables show it.
struct ReportRun {
  std::string series;  ///< the table row and the chart series: the strategy (and the sweep's other axes)
  std::string label;   ///< the run's name, e.g. "ddp-w2-r1"
  std::string dir;     ///< its directory, as shown
  int world_size = 1;  ///< devices (ranks, or dp's replicas)
  RunResult result;    ///< status and summary.json
  std::optional<double> speedup, efficiency;  ///< against the baseline; none when not computable

  bool ok() const { return result.status == "ok"; }
  /// The number at a dotted path of summary.json; NaN when absent.
  double number(const std::string& path) const { return result.number(path); }
  /// Parameters + gradients + optimizer state held per rank, in bytes.
  double model_state_bytes() const;
};

/// A table as a grid: `grid[0]` is the header; `align` one letter per column ('l' or 'r').
struct ReportTable {
  std::string title;
  std::vector<std::vector<std::string>> grid;
  std::string align;
};

/// The tables of results.md: per series (rows) and world size (column groups), the median over
/// repeats, or the status word when no repeat succeeded. Time, memory and communication, result;
/// the step's time breakdown and FLOP/s when some summary has them.
std::vector<ReportTable> report_tables(const std::vector<ReportRun>& runs);

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
  std::vector<ReportRun> runs;     ///< in order of appearance (series colours follow it)
  std::vector<std::string> notes;  ///< failed runs, skipped combinations, caveats
};

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
