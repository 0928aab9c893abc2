// What `strata check` derives from its command line and a strategy's schema without running
// anything (check/check.hpp): the world sizes, the strategy names, the option values a schema
// rejects, and the one global batch every world size divides.

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "check/check.hpp"
#include "strata/errors.hpp"
#include "text/suggest.hpp"

namespace strata {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  for (std::size_t start = 0;;) {
    const auto end = text.find(',', start);
    items.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return items;
    start = end + 1;
  }
}

std::vector<int> parse_world_sizes(const std::string& text) {
  const UsageError bad(fmt::format("--world-sizes takes a comma-separated list of positive integers, got '{}'.", text),
                       "Write for example `--world-sizes 1,2,3`.");
  std::vector<int> sizes;
  for (const auto& item : split_commas(text)) {
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos) throw bad;
    const int w = std::stoi(item);
    if (w < 1) throw bad;
    sizes.push_back(w);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

std::vector<std::string> parse_strategy_names(const std::string& text, const std::string& where) {
  auto names = split_commas(text);
  for (const auto& name : names)
    if (name.empty())
      throw UsageError(fmt::format("`{} {}` has an empty strategy name.", where, text),
                       fmt::format("Write one name, or several separated by commas: `{} NAME,NAME`.", where));
  return names;
}

namespace detail {

std::vector<Violation> violating_values(const OptionSpec& spec) {
  const auto t = spec.type;
  const bool integer = t == OptionType::kInt || t == OptionType::kIntList;
  const bool number = integer || t == OptionType::kFloat || t == OptionType::kFloatList;
  const bool list = t == OptionType::kIntList || t == OptionType::kFloatList || t == OptionType::kStringList;
  const auto text = [&](double v) {
    const std::string s = integer ? to_toml(static_cast<std::int64_t>(v)) : to_toml(v);
    return list ? fmt::format("[{}]", s) : s;
  };
  const Constraint& c = spec.constraint;
  std::vector<Violation> out;
  if (number && c.min) {
    const double m = *c.min;
    const double v = integer ? (c.min_exclusive ? std::floor(m) : std::ceil(m) - 1) : (c.min_exclusive ? m : m - 1);
    out.push_back({text(v), fmt::format("{} {}", c.min_exclusive ? ">" : ">=", m)});
  }
  if (number && c.max) {
    const double m = *c.max;
    const double v = integer ? (c.max_exclusive ? std::ceil(m) : std::floor(m) + 1) : (c.max_exclusive ? m : m + 1);
    out.push_back({text(v), fmt::format("{} {}", c.max_exclusive ? "<" : "<=", m)});
  }
  if ((t == OptionType::kString || t == OptionType::kStringList) && !c.choices.empty()) {
    const std::string s = "\"definitely_not_a_choice\"";
    out.push_back({list ? fmt::format("[{}]", s) : s, fmt::format("one of: {}", join(c.choices))});
  }
  return out;
}

std::int64_t common_global_batch(const std::vector<int>& world_sizes, int micro_batches, std::int64_t at_least) {
  std::int64_t l = micro_batches;
  for (int w : world_sizes) {
    l = std::lcm(l, static_cast<std::int64_t>(w));
    if (l > (std::int64_t{1} << 40)) return l;  // far beyond any usable batch; the caller refuses it
  }
  return (at_least + l - 1) / l * l;
}

}  // namespace detail

}  // namespace strata
