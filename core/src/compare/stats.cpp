#include "compare/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace strata::stats {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// The q-quantile of sorted `v` by linear interpolation between closest ranks (numpy's default).
double quantile(const std::vector<double>& v, double q) {
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace

double Spread::relative_range() const {
  if (n == 0) return kNaN;
  return median != 0 ? (max - min) / std::fabs(median) : (max == min ? 0.0 : kNaN);
}

Spread spread(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double x) { return !std::isfinite(x); }),
               values.end());
  if (values.empty()) return {kNaN, kNaN, kNaN, kNaN, kNaN, 0};
  std::sort(values.begin(), values.end());
  return {values.front(), quantile(values, 0.25), quantile(values, 0.5), quantile(values, 0.75), values.back(),
          values.size()};
}

Interval range(const Spread& s) { return {s.min, s.median, s.max}; }

Interval ratio(const Spread& a, const Spread& b) {
  if (a.n == 0 || b.n == 0 || !(b.min > 0)) return {kNaN, kNaN, kNaN};
  return {a.min / b.max, a.median / b.median, a.max / b.min};
}

Interval scaled(const Interval& i, double factor) { return {i.low * factor, i.point * factor, i.high * factor}; }

bool overlap(const Interval& a, const Interval& b) { return a.low <= b.high && b.low <= a.high; }

Verdict compare_times(const Spread& candidate, const Spread& reference) {
  if (candidate.n == 0 || reference.n == 0) return Verdict::kUnknown;
  if (candidate.max < reference.min) return Verdict::kFaster;
  if (reference.max < candidate.min) return Verdict::kSlower;
  return Verdict::kWithinNoise;
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kFaster: return "faster";
    case Verdict::kSlower: return "slower";
    case Verdict::kWithinNoise: return "within noise";
    case Verdict::kUnknown: break;
  }
  return "unknown";
}

bool suspect_efficiency(const Interval& efficiency, double tolerance) {
  return std::isfinite(efficiency.low) && efficiency.low > 1.0 + tolerance;
}

std::optional<NoiseFinding> identical_work_noise(const std::string& what,
                                                 std::vector<std::pair<std::string, double>> members,
                                                 double threshold) {
  members.erase(std::remove_if(members.begin(), members.end(), [](const auto& m) { return !std::isfinite(m.second); }),
                members.end());
  if (members.size() < 2) return std::nullopt;
  std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<double> values;
  for (const auto& m : members) values.push_back(m.second);
  const double rel = spread(values).relative_range();
  if (!(rel > threshold)) return std::nullopt;
  return NoiseFinding{what, std::move(members), rel, {}};
}

}  // namespace strata::stats
