#pragma once
// The figures of a comparison per combination: a combination's repeats summarized by
// their spread, its speedup and efficiency as intervals against its baseline's runs, whether it is
// faster, slower or within noise of the baseline and of the strategies beside it, and runs of
// identical work that spread beyond the noise threshold. The arithmetic is compare/stats.hpp's;
// this file decides what is compared with what.

#include <optional>
#include <string>
#include <vector>

#include "compare/report.hpp"

namespace strata {

/// A run as the aggregation sees it.
struct MeasuredRun {
  std::string series;                ///< its row of the tables (ReportRun::series)
  int world_size = 1;                ///< devices (ReportRun::world_size)
  std::string label;                 ///< e.g. "ddp-w2-r1"
  const RunResult* result = nullptr;  ///< its status and summary (not owned)
  std::string baseline_series;       ///< the cell its speedup is measured against
  int baseline_world_size = 1;
  /// The axes other than strategy and world size, as text: runs at world size 1 with the same
  /// `work` do identical work (one device computes the same global batch), whatever the strategy.
  std::string work;
};

struct AggregateOptions {
  std::string scaling = "strong";  ///< strong: speedup from step times; weak: from throughputs
  double noise_threshold = 0.10;   ///< relative range above which identical work is noisy
};

struct Aggregate {
  /// One per (series, world size), in order of first appearance, with every field of ReportCell
  /// that `strata compare` sets.
  std::vector<ReportCell> cells;
  /// The repeats of each cell that spread beyond the threshold, then the world-size-1 cells of
  /// the same work whose medians do.
  std::vector<stats::NoiseFinding> noise;
  /// Per run, in input order: its own steady step time against the median of its baseline's runs
  /// (weak: its throughput against theirs), and that over N / baseline N. None when not computable.
  std::vector<std::optional<double>> speedup, efficiency;
  /// Labels of successful runs whose summary lacks steady_step_time_s (step_time_s stood in).
  std::vector<std::string> not_steady;
};

/// Summarizes `runs` (failed ones count in ReportCell::runs only).
Aggregate aggregate(const std::vector<MeasuredRun>& runs, const AggregateOptions& options);

/// "suspect", "within noise of 100%" or "" for an efficiency interval (ReportCell::efficiency_flag):
/// suspect when it lies wholly above 1 (stats::suspect_efficiency), within noise of 100% when it
/// reaches above 1 but also down to 1 or below, so that no efficiency above 100% (a run's, or the
/// median's) is ever shown without a mark.
std::string efficiency_flag(const stats::Interval& efficiency);

/// The cells with a successful run whose steady step time's relative range is above `rel`, or
/// that have a single successful run (no range yet): "ddp@2 (12%)", "ddp@2 (1 run)".
std::vector<std::string> loose_cells(const std::vector<ReportCell>& cells, double rel);

}  // namespace strata
