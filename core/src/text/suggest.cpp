#include "text/suggest.hpp"

#include <algorithm>
#include <vector>

namespace strata::detail {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: insertions, deletions, substitutions and transpositions of two
  // adjacent characters each cost 1, so "mpl" is one edit from "mlp" (and two from "dp").
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string closest_match(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(name, c);
    if (d < best_distance) { best_distance = d; best = c; }
  }
  // A typo changes a few characters; allow about a third of the word, at least 2.
  std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  return best_distance <= limit ? best : std::string{};
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  auto match = closest_match(name, candidates);
  return match.empty() ? std::string{} : " Did you mean '" + match + "'?";
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

}  // namespace strata::detail
