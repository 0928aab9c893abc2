#pragma once
// What a child `strata run --out DIR` left behind (`strata compare` and `strata check` start
// their runs as children): the status and numbers of DIR/summary.json, or the error it printed.

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/json.hpp"

namespace strata {

/// One process segment of a run: a resumed run has one per process that trained it (summary.json's
/// `segments`, oldest first), each with its own strategy, world and figures.
struct RunSegment {
  std::string strategy;
  int world_size = 1;   ///< devices of this segment (ranks, or dp's replicas), as the tables' @N
  std::string backend;  ///< "gloo", "nccl" or "none"; "" when the summary does not say
  std::string device;   ///< e.g. "cpu", "cuda"; "" when the summary does not say
  double from_step = 0;  ///< the step it started from (0 for a fresh start)
  double to_step = 0;    ///< the step it ended at
  double steps = 0;      ///< optimizer steps it ran: what its figures cover

  /// "ddp@2 (steps 50-100)".
  std::string text() const;
};

/// The steady-state timing of a run: what comparisons rank and divide.
struct StepTiming {
  double step_time_s = NAN;    ///< seconds per step: steady_step_time_s, else step_time_s
  double samples_per_s = NAN;  ///< global batch / step_time_s
  /// False for a summary without steady_step_time_s (an older run): step_time_s, the median of
  /// every step including the first ones, stands in for it.
  bool steady = true;
};

/// A run's outcome as its summary.json tells it. Its top-level figures (train_time_s, step_time_s,
/// samples_per_s, memory, comm) are its last segment's: `strata compare` and `strata plot` show
/// those, never a blend of segments.
struct RunResult {
  std::string status = "not run";  ///< the summary's "status" (ok | failed); "not run" without a summary
  std::string error;               ///< the summary's "error", or why summary.json could not be read
  std::optional<Json> summary;     ///< the parsed summary.json, when there is one
  /// The summary's `segments`; a summary without them (an older run) is one segment made of its
  /// top-level keys. Empty without a summary.
  std::vector<RunSegment> segments;

  /// The number at a dotted path of the summary ("memory.peak_bytes"); NaN when absent.
  double number(const std::string& path) const;
  /// Whether more than one process trained the run (it was resumed).
  bool resumed() const { return segments.size() > 1; }
  /// The steps the top-level figures cover: the last segment's; NaN without a summary.
  double measured_steps() const;
  /// The top-level (last segment's) steady-state step time and throughput; NaN fields without a
  /// summary or a positive step time.
  StepTiming step_timing() const;
};

/// Reads DIR/summary.json. A missing file leaves the status "not run"; an unreadable one makes
/// it "failed" with the parse error.
RunResult read_run_result(const std::filesystem::path& dir);

/// The error of a failed run from its output lines: its "error:" paragraph (the first one; a
/// launcher's own lines about stopping the others follow it), else the last lines of its output.
std::string error_from_output(const std::vector<std::string>& lines);

}  // namespace strata
