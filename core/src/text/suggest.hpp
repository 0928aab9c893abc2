#pragma once
// "Did you mean" suggestions for unknown names and keys.

#include <string>
#include <vector>

namespace strata::detail {

/// Levenshtein distance between two strings.
std::size_t edit_distance(const std::string& a, const std::string& b);
/// The candidate closest to `name` if it is close enough to be a plausible typo, else "".
std::string closest_match(const std::string& name, const std::vector<std::string>& candidates);
/// " Did you mean 'x'?" or "" when nothing is close.
std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates);
/// "a, b, c".
std::string join(const std::vector<std::string>& items, const std::string& separator = ", ");

}  // namespace strata::detail
