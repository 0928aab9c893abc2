#pragma once
// The files of a comparison: results.csv and results.json (one row per run, each with
// its combination's spreads and verdicts), results.md (the tables, the ranking, the noise found,
// the notes) and the Report that report.html renders, all from one CompareRecord.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "compare/aggregate.hpp"
#include "compare/report.hpp"
#include "sweep/sweep.hpp"
#include "io/json.hpp"
#include "io/run_result.hpp"

namespace strata {

/// One run of a comparison and what it produced.
struct CompareRow {
  SweepRun run;
  RunResult result;  ///< status: ok | failed | interrupted | not started; error: the cause
  std::filesystem::path dir;
  int order = 0;       ///< 1-based place among the runs in the order they ran; 0: not started
  double seconds = 0;  ///< wall time of its process
  std::optional<double> speedup, efficiency;  ///< its own, against its baseline's median (Aggregate)
  std::optional<std::int64_t> failed_rank;    ///< the rank that failed first, when the run says
  std::string signal;                         ///< "SIGKILL" when a rank (or the run) died by a signal

  const std::string& status() const { return result.status; }
  double number(const std::string& path) const { return result.number(path); }
};

/// Everything the files of a comparison say.
struct CompareRecord {
  const Sweep* sweep = nullptr;
  const SweepPlan* plan = nullptr;
  std::filesystem::path dir;
  std::vector<CompareRow> rows;                  ///< combination by combination, repeat by repeat
  Aggregate aggregate;                           ///< of `rows`
  std::vector<std::vector<std::string>> rounds;  ///< each round's labels in the order they ran
  std::optional<ReportWarmup> warmup;
  std::string stopped;             ///< the auto-repeat mode: why no further round ran ("" when off)
  std::vector<std::string> kept;   ///< --resume: runs that ended ok in an earlier session, kept as they were
  std::vector<std::string> loose;  ///< the auto-repeat mode: cells left above until_tight
  std::string date;
  std::string machine;
};

/// The row of the tables a run belongs to: its strategy, then the sweep's other axes as ", key=value".
std::string series_of(const SweepRun& run);
/// The other axes alone (", key=value..." without the strategy): world-size-1 runs with the same
/// text do identical work.
std::string work_of(const SweepRun& run);

std::string results_csv(const CompareRecord& record);
Json results_json(const CompareRecord& record);
std::string results_markdown(const CompareRecord& record);
Report comparison_report(const CompareRecord& record);

/// The Noise section's lines (warnings naming the runs and figures, the advice), "" when none:
/// results.md holds them, and the command's output repeats them.
std::vector<std::string> noise_lines(const CompareRecord& record);

}  // namespace strata
