#pragma once
// `strata check NAME`: the conformance suite of the Strategy contract (core/include/strata/
// strategy.hpp), run against any strategy plugin on small models on the CPU. The pieces that
// need no runs are declared here and live in inputs.cpp (the CLI parses --world-sizes with one of
// them); the command itself is check_strategy() in run.hpp, check.cpp.

#include <cstdint>
#include <string>
#include <vector>

#include "strata/options.hpp"

namespace strata {

/// The items of a comma-separated list, as written (empty ones included).
std::vector<std::string> split_commas(const std::string& text);
/// "1,2,3" -> {1, 2, 3}, sorted, without repeats. Throws UsageError for anything but a
/// comma-separated list of positive integers.
std::vector<int> parse_world_sizes(const std::string& text);
/// "a,b" -> {"a", "b"}, in order. Throws UsageError for an empty name, quoting the
/// list after `where` (the command or option it came with).
std::vector<std::string> parse_strategy_names(const std::string& text, const std::string& where = "strata check");

namespace detail {

/// A value that an option's constraint rejects, in TOML, and the rule it breaks.
struct Violation {
  std::string toml;  ///< e.g. "0", "-1.0", "[0]", "\"not_a_choice\""
  std::string rule;  ///< e.g. ">= 1", "one of: a, b"
};
/// One violating value per bound (min, max) and per choice list of `spec`; empty when it is
/// unconstrained (or only a path).
std::vector<Violation> violating_values(const OptionSpec& spec);

/// The smallest multiple of every world size and of `micro_batches` that is >= `at_least`: one
/// global batch that every world size of the check divides evenly.
std::int64_t common_global_batch(const std::vector<int>& world_sizes, int micro_batches, std::int64_t at_least);

}  // namespace detail
}  // namespace strata
