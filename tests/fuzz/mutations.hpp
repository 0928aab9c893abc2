#pragma once
// Deterministic mutations of experiment files for the config fuzz test (config_fuzz.cpp).
//
// A case is one mutated experiment plus, sometimes, `--set` overrides, environment variables and
// extra command-line arguments. make_case(seeds, catalog, seed, index) depends only on its
// arguments: the same seed and index give the same case on every machine, so a failing case is
// reproduced with `strata_config_fuzz --seed S --case N` (or the repro.sh written next to it).

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace strata::fuzz {

/// One bundled experiment the mutations start from.
struct SeedFile {
  std::string name;  ///< file name, for case labels (e.g. "quickstart.toml")
  std::string text;  ///< its contents
};

/// The kind of value a key takes, to bias values towards ones that pass the type check.
enum class ValueKind { kBool, kInt, kFloat, kString, kIntList, kFloatList, kStringList };

/// A key an experiment may set.
struct KnownKey {
  std::string name;  ///< key inside its section, e.g. "steps"
  ValueKind kind = ValueKind::kString;
};

/// The keys of every section: core sections, and per plugin of [model], [dataset], [strategy].
struct Catalog {
  std::map<std::string, std::vector<KnownKey>> sections;  ///< "train" -> its keys
  /// "model" -> { "mlp" -> its options, ... } (the `name` key excluded).
  std::map<std::string, std::map<std::string, std::vector<KnownKey>>> plugins;
  /// Registered names per plugin section and optimizer names ("optimizer" -> sgd, adamw).
  std::map<std::string, std::vector<std::string>> names;
};

/// One fuzz case: what to write and how to run `strata validate` on it.
struct Case {
  std::uint64_t seed = 0;
  int index = 0;
  std::string base;                    ///< the seed file it was made from
  std::vector<std::string> mutations;  ///< short descriptions, e.g. "extreme train.steps=1e308"
  std::string text;                    ///< the mutated file
  /// The experiment argument; empty: the written case file. Else a special path (/dev/zero, ...).
  std::string file_override;
  std::vector<std::string> overrides;  ///< `--set` values
  std::vector<std::pair<std::string, std::string>> env;  ///< variables set for the child
  std::vector<std::string> extra_args;                   ///< further command-line arguments
  /// True when only the file's contents vary (no env, args or file substitution): then a case
  /// `validate` accepts must also start under `run`.
  bool file_only() const { return env.empty() && extra_args.empty() && file_override.empty(); }
  /// One line: "case N (seed S) from BASE: m1; m2".
  std::string label() const;
};

/// Case `index` of the run with `seed`.
Case make_case(const std::vector<SeedFile>& seeds, const Catalog& catalog, std::uint64_t seed, int index);

/// `text` as a bash word: plain when safe, else $'...' with \xHH escapes (no raw control bytes).
std::string shell_quote(const std::string& text);

}  // namespace strata::fuzz
