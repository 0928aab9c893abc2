#pragma once
// Markdown tables padded to align in a terminal too (`strata compare`, `strata check`).

#include <string>
#include <vector>

namespace strata::detail {

/// `grid[0]` is the header. `align` has one letter per column: 'l' (left), 'r' (right) or 'n'
/// (left, not padded: a long last column). Ends with a newline.
std::string markdown_table(const std::vector<std::vector<std::string>>& grid, const std::string& align);

}  // namespace strata::detail
