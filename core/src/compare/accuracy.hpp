#pragma once
// `strata compare --estimate`: the predictions of `strata estimate` beside what the comparison
// measured, cell by cell (strategy x world size), with the error of each and the median and worst
// errors over the cells above world size 1 (world size 1 is where the profile comes from).
//
// Step time is the cell's median steady step time; memory is its median tensor peak
// (memory.peak_tensor_bytes), against the estimate's peak per rank, or for a strategy that keeps
// every replica in one process on the CPU (dp) the process's, which is what that run measures.

#include <string>
#include <vector>

#include "compare/report.hpp"
#include "strata/json.hpp"

namespace strata {

struct AccuracyRow {
  std::string strategy;
  int world_size = 1;
  double predicted_s = 0, measured_s = 0;
  double predicted_bytes = 0, measured_bytes = 0;
  bool process_bytes = false;  ///< the predicted figure is the process's (every replica), not one rank's
  bool coarse = false;         ///< the prediction is coarse (a strategy known by its Footprint)
  bool counted = false;        ///< among the cells the medians and the worst cases cover
  /// The cell's own measured spread, (max - min) / median of its steady step times (0 for one run).
  double spread = 0;
  /// Its spread exceeds kAccuracyNoise: reported apart, out of the medians (not dropped).
  bool noisy = false;
  double time_error() const { return (predicted_s - measured_s) / measured_s; }
  double memory_error() const { return (predicted_bytes - measured_bytes) / measured_bytes; }
};

/// A cell whose measured steady step time spreads more than this is too noisy to judge a
/// prediction by: its error is shown apart from the medians.
inline constexpr double kAccuracyNoise = 0.03;

/// The median absolute errors of one strategy's counted cells.
struct StrategyAccuracy {
  std::string strategy;
  std::size_t cells = 0;  ///< counted, not noisy
  std::size_t noisy = 0;  ///< counted but noisier than kAccuracyNoise
  double median_time_error = 0, median_memory_error = 0;  ///< NaN when none
};

struct Accuracy {
  std::vector<AccuracyRow> rows;  ///< cells with a measurement and an applicable prediction, in the cells' order
  std::vector<std::string> unmatched;  ///< cells without a prediction (another axis than strategy and world size)
  double median_time_error = 0;        ///< of |error|, over the rows above world size 1, or where
                                       ///< there are none the baseline's others at 1 (NaN when none)
  double median_memory_error = 0;
  std::size_t counted = 0;             ///< the rows those medians cover
  /// The medians cover world size 1 (other strategies than the baseline's): a sweep of one device
  /// only, such as every strategy on one GPU.
  bool counted_world_1 = false;
  std::vector<StrategyAccuracy> strategies;  ///< per strategy, in the rows' order
};

/// Pairs the measured `cells` (Aggregate::cells) with the rows of `estimate` (estimate.json).
Accuracy accuracy(const std::vector<ReportCell>& cells, const Json& estimate);

/// The table (markdown), the medians and the worst cases, as `strata compare --estimate` prints
/// them and writes accuracy.md.
std::string accuracy_markdown(const Accuracy& a);
std::string accuracy_csv(const Accuracy& a);

}  // namespace strata
