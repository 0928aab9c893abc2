// The figures of report.html and results.md per series and world size, when a report does not
// carry them: `strata compare` hands its own (Report::cells, from compare/aggregate.cpp);
// `strata plot` and any other report get the same aggregation of their runs, against the baseline
// the report names. One arithmetic for both (aggregate() on compare/stats.hpp).

#include "compare/aggregate.hpp"
#include "compare/report.hpp"

namespace strata {

namespace {

/// The baseline's series for a series: the baseline strategy with the same ", k=v" suffix.
std::string baseline_series(const std::string& series, const std::string& baseline_strategy) {
  if (baseline_strategy.empty()) return series;
  const auto comma = series.find(", ");
  return baseline_strategy + (comma == std::string::npos ? std::string() : series.substr(comma));
}

}  // namespace

Aggregate aggregate_report(const Report& report) {
  std::vector<MeasuredRun> runs;
  for (const auto& r : report.runs) {
    const auto comma = r.series.find(", ");
    runs.push_back({r.series, r.world_size, r.label, &r.result, baseline_series(r.series, report.baseline_strategy),
                    report.baseline_world_size, comma == std::string::npos ? std::string() : r.series.substr(comma)});
  }
  return aggregate(runs, {report.scaling, report.noise_threshold});
}

std::vector<ReportCell> report_cells(const Report& report) {
  return report.cells.empty() ? aggregate_report(report).cells : report.cells;
}

}  // namespace strata
