#include "text/suggest.hpp"

#include <algorithm>
#include <numeric>

namespace strata::detail {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
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
