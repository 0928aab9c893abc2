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
/// `value` as it may appear in a message: control characters and NULs escaped (\n, \t, \x07), and
/// a value longer than `max_bytes` shortened to its start and end with its length in between, so
/// hostile input can neither flood the terminal nor write to it.
std::string shown(const std::string& value, std::size_t max_bytes = 80);
/// `text` safe for a terminal: control characters other than newlines escaped, and lines longer
/// than `max_line` shortened in the middle (the last defence; values are shown() where they are
/// put into a message).
std::string terminal_safe(const std::string& text, std::size_t max_line = 1000);
/// "a, b, c".
std::string join(const std::vector<std::string>& items, const std::string& separator = ", ");

}  // namespace strata::detail
