#pragma once
// The median of measurements (step times of a run, train times of a comparison's repeats).

#include <algorithm>
#include <cmath>
#include <vector>

namespace strata {

/// Median of the finite values of `v`; NaN when there are none.
inline double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace strata
