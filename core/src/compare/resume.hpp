#pragma once
// `strata compare --resume`: the record of what a comparison runs (DIR/comparison.json), written
// when it starts, and the check that a resume asks for the same comparison.

#include <filesystem>

#include "run.hpp"
#include "strata/json.hpp"
#include "sweep/sweep.hpp"

namespace strata {

/// The file that records what a comparison runs, so that --resume can tell the same comparison.
inline constexpr const char* kComparisonFile = "comparison.json";

/// What DIR/comparison.json records: the sweep file, the --set options and every combination's
/// label and overrides, in the plan's order.
Json comparison_json(const CompareRequest& request, const SweepPlan& plan);

/// Throws UsageError unless `dir` holds a comparison of exactly these combinations.
void check_resumable(const std::filesystem::path& dir, const Json& now);

}  // namespace strata
