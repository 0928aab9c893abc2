#pragma once
// The charts of report.html (inline SVG figures), apart from the page around them (report.cpp).

#include <string>
#include <vector>

#include "compare/report.hpp"

namespace strata::detail {

/// The figures of the Charts section, in order: step time, speedup, efficiency, throughput and
/// peak memory against world size (each with min..max error bars), memory by part, bus bytes, loss
/// curves, and the step's time breakdown and FLOP/s when the summaries have them.
std::string report_charts(const Report& report, const std::vector<ReportCell>& cells);

}  // namespace strata::detail
