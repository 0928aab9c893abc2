#pragma once
// `strata check NAME`: the conformance suite of the Strategy contract (core/include/strata/
// strategy.hpp), run against any strategy plugin on small models on the CPU. The pieces that
// need no runs (the workloads, the option sets, the reference) are declared here and live in
// inputs.cpp (the CLI parses --world-sizes with one of them); the command itself is
// check_strategy() in run.hpp, check.cpp.

#include <cstdint>
#include <string>
#include <vector>

#include "strata/options.hpp"

namespace strata {

class Registry;
struct RegistryEntry;

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

/// A small experiment that the strategy and the reference both train. The first one (AdamW) also
/// serves the memory, communication and state-dict checks. SGD makes the others sensitive to the
/// scale of the gradients, to which Adam(W) is blind: gradients summed over ranks or
/// micro-batches instead of averaged give AdamW the same steps (up to epsilon), but not SGD.
struct Workload {
  const char* name;   ///< file stem and run label
  const char* title;  ///< in the table
  const char* model;  ///< body of [model]
  const char* dataset;  ///< body of [dataset]; {train} is the number of training examples
  const char* optimizer;  ///< body of [optimizer]
  int micro_batches;
};
constexpr int kMicroBatches = 2;  ///< the largest micro_batches of any workload
/// The workloads of `--models standard` (the MLP and the CNN) or `--models transformers` (a Llama
/// and a ViT); throws UsageError for another name.
std::vector<Workload> workloads_of(const std::string& models);
/// The experiment file of workload `w` with strategy `reference`, `steps` steps and `global_batch`.
std::string workload_toml(const Workload& w, std::int64_t global_batch, const std::string& reference, std::int64_t steps);

/// One set of option values the strategy is checked with: the defaults (with --set), or a row of
/// its option matrix.
struct Variant {
  std::string label;               ///< "" for the defaults
  std::vector<std::string> sets;   ///< "KEY=VALUE", KEY an option of the strategy
  bool all_workloads = true;       ///< a matrix row runs the first workload only
};

/// The strategy every run is compared with: the one that runs on one device.
std::string reference_strategy(const Registry& registry);
/// The option values the strategy is checked with: the defaults with `sets` (KEY=VALUE, with or
/// without the `strategy.` prefix; a key the strategy lacks is a UsageError), then, when there are
/// none and `matrix` is set, its option matrix.
std::vector<Variant> variants_of(const std::vector<std::string>& sets, bool matrix, const RegistryEntry& entry);

/// The value of `key` (dotted, e.g. "optimizer.name") in the experiment file `file` as TOML text
/// (a string quoted), or "" when the file does not set it: what an Equivalence::exact_when
/// condition on the experiment is compared with.
std::string experiment_value(const std::string& file, const std::string& key);

/// The smallest multiple of every world size and of `micro_batches` that is >= `at_least`: one
/// global batch that every world size of the check divides evenly.
std::int64_t common_global_batch(const std::vector<int>& world_sizes, int micro_batches, std::int64_t at_least);

}  // namespace detail
}  // namespace strata
