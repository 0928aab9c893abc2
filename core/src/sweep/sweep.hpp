#pragma once
// The sweep file of `strata compare`: a base experiment, axes whose cross product is
// run, a baseline, repeats, strong or weak scaling, how the runs are measured, and overrides
// applied to every run.
//
//   [compare]
//   base = "fashion_mnist_cnn.toml"     # relative to the sweep file
//   scaling = "strong"                  # strong: same global batch; weak: same per-rank batch
//   repeats = 3                         # rounds of every combination, interleaved
//   seed = 0                            # the shuffled order of each round
//   baseline = { strategy = "single", world_size = 1 }
//   [compare.axes]
//   strategy = ["single", "ddp", "zero2"]
//   world_size = [1, 2]
//   "optimizer.lr" = [0.01]             # any dotted experiment key
//   [compare.set]
//   "train.steps" = 50
//
// parse_sweep() checks the file's own structure (against sweep_schema(), which `strata describe
// compare` prints) and applies the command line's `--set`s: `compare.KEY=VALUE` changes the sweep
// itself (`compare.repeats=3`, `compare.axes.world_size=[1,2]`, `compare.axes."optimizer.lr"=[0.1]`),
// any other key is applied to every run as [compare.set] is. plan_sweep() (sweep_plan.cpp) expands
// the combinations against the registry (how each strategy maps the world size) and derives every
// run's overrides, each with the sweep-file position (or `--set`) it comes from so that the base
// experiment's validation can point at the entry that caused an error; round_order() is the order
// each round runs them in.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "strata/errors.hpp"
#include "strata/options.hpp"

namespace strata {

class Registry;
struct Placement;

/// A value of the sweep, as TOML text (for an override) and as shown in tables.
struct SweepValue {
  std::string toml;     ///< e.g. "0.01", "\"ddp\"", "[32, 32]"
  std::string display;  ///< e.g. "0.01", "ddp", "[32, 32]"
  SourceLocation where;
};

/// One axis: "strategy", "world_size", or a dotted experiment key.
struct SweepAxis {
  std::string key;
  std::vector<SweepValue> values;
  SourceLocation where;
};

/// An override applied to every run ([compare.set] or the command line's --set).
struct SweepOverride {
  std::string key;
  std::string toml;
  SourceLocation where;
};

/// [compare]'s own options; its tables (baseline, axes, set) are SweepSchema::tables.
struct CompareOptions {
  std::string base;                ///< the base experiment, relative to the sweep file (required)
  std::string scaling = "strong";  ///< strong: every run has the base global batch; weak: the batch per rank is fixed
  std::int64_t repeats = 3;        ///< rounds: runs per combination, interleaved; tables show their spread
};

/// How `strata compare` measures: rounds of every combination in a shuffled order, a
/// warm-up run first, the noise verdicts, and the auto-repeat mode. [compare] keys of the same names.
struct CompareMeasure {
  std::int64_t seed = 0;              ///< seeds the shuffled order of each round
  bool shuffle = true;                ///< false: every round in the sweep's order
  std::int64_t warmup_run_steps = 10; ///< steps of the warm-up run before the first round; 0: none
  double noise_threshold = 0.10;      ///< relative range above which identical work is reported as noisy
  double until_tight = 0;             ///< > 0: rounds after `repeats` until every relative range is at most this
  std::int64_t max_repeats = 10;      ///< the most rounds the auto-repeat mode (until_tight, budget_s) runs
  double budget_s = 0;                ///< > 0: rounds after `repeats` while the next would end within this, seconds
  /// CPU runs: "equal" gives every rank of every run the same intra-op threads (the host's
  /// hardware threads over the largest world size), as each GPU brings its own; "share" divides
  /// the host's threads among each run's ranks (more threads per rank at smaller world sizes).
  /// An experiment that sets [train] threads (or an axis over it) keeps its own.
  std::string cpu_threads = "equal";
};

struct Sweep {
  std::filesystem::path file;  ///< the sweep file as given
  std::filesystem::path base;  ///< the base experiment, resolved against the sweep's directory
  SourceLocation base_at;
  std::string scaling = "strong";
  SourceLocation scaling_at;
  std::int64_t repeats = CompareOptions{}.repeats;
  std::vector<SweepAxis> axes;  ///< in file order
  /// Baseline as (axis key, display value); axes it leaves out take each run's own value.
  std::vector<std::pair<std::string, std::string>> baseline;
  SourceLocation baseline_at;
  std::vector<SweepOverride> set;
  CompareMeasure measure;
  /// Whether rounds may follow the first `repeats` (until_tight or budget_s given).
  bool auto_repeat() const { return measure.until_tight > 0 || measure.budget_s > 0; }
  /// The most rounds the comparison may run: repeats, or max_repeats in the auto-repeat mode.
  std::int64_t max_rounds() const { return auto_repeat() ? std::max(repeats, measure.max_repeats) : repeats; }
};

/// The axes of [compare.axes] that are not experiment keys.
struct CompareAxes {
  std::vector<std::string> strategy;     ///< registered strategy names; each run's strategy.name
  std::vector<std::int64_t> world_size;  ///< devices per run: ranks, or dp's replicas in one process
};

/// A key of the sweep file whose value is not an option (a table, or any experiment key), as
/// `strata describe compare` prints it.
struct SweepKeyDoc {
  std::string name;
  std::string type;
  std::string default_text;
  std::string doc;
};

/// The keys of a sweep file: what parse_sweep() validates against and `strata describe compare`
/// prints.
struct SweepSchema {
  OptionsSchema options;             ///< [compare] base, scaling, repeats, then CompareMeasure's keys
  std::vector<SweepKeyDoc> tables;   ///< [compare] baseline, axes, set
  OptionsSchema axes;                ///< [compare.axes] strategy, world_size
  SweepKeyDoc any_axis;              ///< [compare.axes] "section.key" = [values]
  SweepKeyDoc any_set;               ///< [compare.set] "section.key" = value
  std::string overrides;             ///< how `--set` reaches the sweep, a paragraph
};
const SweepSchema& sweep_schema();

/// Whether `file` is a sweep: a TOML file with a top-level [compare] table. False for a file
/// that does not parse (`strata validate` then reports it as an experiment).
bool is_sweep_file(const std::filesystem::path& file);

/// Parses and checks the structure of a sweep file, then applies `overrides` ("key=value", from
/// the command line): a key under `compare.` (TOML's quoting understood, as in
/// `compare.axes."optimizer.lr"=[0.1]`) replaces that entry of the sweep (an axis or a
/// [compare.set] entry in its place, a new one last; `compare.axes={...}` the whole table), any
/// other key is applied to every run after [compare.set]. Throws ConfigError with
/// file:line:column, or the `--set` it comes from.
Sweep parse_sweep(const std::filesystem::path& file, const std::vector<std::string>& overrides = {});

/// The overrides ("distributed.nproc" and, for dp, its device option) that run a strategy of
/// `placement` at world size `world` (ranks, or devices in one process); nullopt when it cannot
/// (a one-device strategy above world size 1). `strata compare` and `strata check` use it.
std::optional<std::vector<std::pair<std::string, std::string>>> world_overrides(const Placement& placement,
                                                                                 int world);

/// One run of a sweep.
struct SweepRun {
  std::string strategy;
  int world_size = 1;                                       ///< devices (ranks, or dp's replicas)
  std::vector<std::pair<std::string, std::string>> values;  ///< (axis key, display) of every axis
  int repeat = 1;                                           ///< 1-based: the round it runs in
  std::size_t combination = 0;                              ///< its index in SweepPlan::combinations
  std::int64_t steps = 0;                                   ///< train.steps as resolved (check_sweep sets it)
  std::string label;                                        ///< directory name, e.g. "ddp-w2-lr0.01-r1"
  std::vector<std::string> overrides;                       ///< "key=value" for `strata run --set`
  std::vector<SourceLocation> origins;                      ///< where each override comes from
};

struct SweepPlan {
  /// One run per combination (repeat 1, labelled without "-rN"), in the cross product's order.
  std::vector<SweepRun> combinations;
  /// The runs of the first `repeats` rounds, combination by combination (run_of() of each).
  std::vector<SweepRun> runs;
  std::vector<std::string> skipped;  ///< combinations that do not apply, with the reason
  int baseline_world_size = 1;
  bool numbered = false;  ///< labels end in "-r<repeat>" (the sweep may run more than one round)
  /// CPU runs under cpu_threads = "equal": the intra-op threads every rank was given (0: none
  /// given: a GPU sweep, "share", or the experiment's own [train] threads), out of host_threads.
  int rank_threads = 0;
  int host_threads = 0;
};

/// Expands the cross product: the world size becomes `distributed.nproc` for strategies with a
/// rank per device, the strategy's device-count option for in-process ones (dp), and a strategy
/// that runs on one device is kept at world size 1 only (the others are listed as skipped).
/// Weak scaling multiplies the base global batch by world size / baseline world size.
/// `base_strategy`, `base_world_size` and `base_global_batch` come from the base experiment (with
/// [compare.set] applied): the strategy and world size of runs without those axes, and the
/// global batch that weak scaling scales. Throws ConfigError.
SweepPlan plan_sweep(const Sweep& sweep, const Registry& registry, const std::string& base_strategy,
                     int base_world_size, std::int64_t base_global_batch);

/// Combination `combination` of `plan` at repeat (round) `repeat`: its label gets "-r<repeat>" when
/// the plan is numbered.
SweepRun run_of(const SweepPlan& plan, std::size_t combination, int repeat);

/// The order in which round `round` (1-based) runs the plan's `combinations`: a permutation of
/// 0..combinations-1, shuffled from (seed, round) alone, so that the same seed gives the same order
/// with any compiler and standard library (a Fisher-Yates shuffle over std::mt19937_64, whose
/// output the standard fixes); 0, 1, 2, ... when `shuffle` is false. Every combination of round r
/// runs before any of round r + 1: drift of a shared machine spreads over all combinations.
std::vector<std::size_t> round_order(std::size_t combinations, std::int64_t seed, int round, bool shuffle = true);

/// The runs of round `round` in the order `strata compare` (and its --dry-run) runs them: run_of()
/// of every combination at repeat `round`, in round_order(measure.seed, round, measure.shuffle).
std::vector<SweepRun> round_runs(const SweepPlan& plan, const CompareMeasure& measure, int round);

}  // namespace strata
