#pragma once
// What a child `strata run --out DIR` left behind (`strata compare` and `strata check` start
// their runs as children): the status and numbers of DIR/summary.json, or the error it printed.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/json.hpp"

namespace strata {

/// A run's outcome as its summary.json tells it.
struct RunResult {
  std::string status = "not run";  ///< the summary's "status" (ok | failed); "not run" without a summary
  std::string error;               ///< the summary's "error", or why summary.json could not be read
  std::optional<Json> summary;     ///< the parsed summary.json, when there is one

  /// The number at a dotted path of the summary ("memory.peak_bytes"); NaN when absent.
  double number(const std::string& path) const;
};

/// Reads DIR/summary.json. A missing file leaves the status "not run"; an unreadable one makes
/// it "failed" with the parse error.
RunResult read_run_result(const std::filesystem::path& dir);

/// The error of a failed run from its output lines: its "error:" paragraph (the first one; a
/// launcher's own lines about stopping the others follow it), else the last lines of its output.
std::string error_from_output(const std::vector<std::string>& lines);

}  // namespace strata
