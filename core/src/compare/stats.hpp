#pragma once
/// \file stats.hpp
/// The arithmetic of comparisons on a noisy machine: the spread of a figure over repeated runs,
/// intervals of ratios (speedup, efficiency) computed from the runs rather than from medians
/// alone, and the verdict that two results are "within noise" instead of a ranking.
///
/// A figure measured over n repeats is summarized by its Spread (min, quartiles, median, max).
/// The interval a comparison uses is the range [min, max]: with the few repeats a sweep affords
/// (3 by default) the quartiles are barely inside it, and a ranking must hold for every run, not
/// for the middle half. A ratio of two figures gets the interval of every pairing of their runs:
/// [min(a) / max(b), max(a) / min(b)]. Two results whose intervals overlap are within noise.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace strata::stats {

/// One figure over repeated runs. n = 0: no finite value (every field NaN).
struct Spread {
  double min = 0;
  double q1 = 0;      ///< first quartile (linear interpolation, as numpy's default)
  double median = 0;
  double q3 = 0;      ///< third quartile
  double max = 0;
  std::size_t n = 0;  ///< finite values summarized
  /// (max - min) / median: the relative width of the range (0 for one value; NaN when n = 0).
  double relative_range() const;
};

/// The spread of `values`, ignoring non-finite ones.
Spread spread(std::vector<double> values);

/// An estimate with the interval the runs allow.
struct Interval {
  double low = 0;
  double point = 0;
  double high = 0;
  /// Whether `value` lies inside [low, high].
  bool contains(double value) const { return low <= value && value <= high; }
};

/// The range of a spread as an interval around its median.
Interval range(const Spread& s);
/// a / b over every pairing of their runs: point median(a) / median(b), interval
/// [min(a) / max(b), max(a) / min(b)]. NaN fields when either is empty or b can be 0.
Interval ratio(const Spread& a, const Spread& b);
/// Every field of `i` times `factor` (> 0): efficiency = speedup / (N / N0).
Interval scaled(const Interval& i, double factor);
/// Whether two intervals share a point.
bool overlap(const Interval& a, const Interval& b);

/// How a candidate's time compares with a reference's (lower is better).
enum class Verdict {
  kFaster,       ///< every run of the candidate beat every run of the reference
  kSlower,       ///< every run of the reference beat every run of the candidate
  kWithinNoise,  ///< the ranges overlap: no ranking
  kUnknown,      ///< a side has no runs
};
Verdict compare_times(const Spread& candidate, const Spread& reference);
/// "faster", "slower", "within noise", "unknown".
const char* verdict_name(Verdict v);

/// An efficiency (or speedup over the ideal) above 1 beyond the noise band is suspect: the
/// interval lies wholly above 1 + `tolerance`. A superlinear result is possible (caches), but it
/// is never shown as a plain result.
bool suspect_efficiency(const Interval& efficiency, double tolerance = 0.0);

/// Runs that should have taken the same time (the repeats of one configuration, or world-size-1
/// strategies doing the same work) but spread by more than `threshold` (relative range): the
/// medians by name, sorted, with the range they span. Empty when within the threshold.
struct NoiseFinding {
  std::string what;                                     ///< which group, for the message
  std::vector<std::pair<std::string, double>> members;  ///< (label, figure), ascending
  double relative_range = 0;                            ///< (max - min) / median of the members
  std::string note;  ///< what the caller read in it, e.g. a steady difference rather than noise; may be empty
};
std::optional<NoiseFinding> identical_work_noise(const std::string& what,
                                                 std::vector<std::pair<std::string, double>> members,
                                                 double threshold);

}  // namespace strata::stats
