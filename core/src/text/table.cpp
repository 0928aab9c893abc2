#include "text/table.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace strata::detail {

std::string markdown_table(const std::vector<std::vector<std::string>>& grid, const std::string& align) {
  std::vector<std::size_t> width(align.size(), 3);
  for (const auto& line : grid)
    for (std::size_t c = 0; c < line.size() && c < width.size(); ++c)
      if (align[c] != 'n') width[c] = std::max(width[c], line[c].size());
  std::string out;
  for (std::size_t l = 0; l < grid.size(); ++l) {
    out += "|";
    for (std::size_t c = 0; c < grid[l].size(); ++c) {
      const std::size_t w = c < width.size() && align[c] != 'n' ? width[c] : 0;
      out += c < align.size() && align[c] == 'r' ? fmt::format(" {:>{}} |", grid[l][c], w)
                                                 : fmt::format(" {:<{}} |", grid[l][c], w);
    }
    out += "\n";
    if (l != 0) continue;
    out += "|";
    for (std::size_t c = 0; c < align.size(); ++c)
      out.append(align[c] == 'r' ? "-" : ":").append(width[c], '-').append(align[c] == 'r' ? ":|" : "-|");
    out += "\n";
  }
  return out;
}

}  // namespace strata::detail
