// The sweep file of `strata compare`: its keys (sweep_schema(), also printed by
// `strata describe compare`), how the file and the command line's `--set`s build a Sweep, and the
// checks across keys (the baseline among the axis values, a key that is both an axis and fixed).
#include "sweep/sweep.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "config/checks.hpp"
#include "text/suggest.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

const Schema<CompareMeasure>& measure_schema() {
  static const Schema<CompareMeasure> schema = [] {
    Schema<CompareMeasure> m;
    m.option("seed", &CompareMeasure::seed,
             "seeds the shuffled order in which each round runs the combinations (results.json `rounds` records it)",
             at_least(0))
        .option("shuffle", &CompareMeasure::shuffle,
                "shuffle each round's order (false: the sweep's order, every round)")
        .option("warmup_run_steps", &CompareMeasure::warmup_run_steps,
                "steps of a warm-up run of the first combination before the first round, discarded from the "
                "figures; 0: no warm-up run",
                at_least(0))
        .option("noise_threshold", &CompareMeasure::noise_threshold,
                "relative range ((max - min) / median) above which runs of identical work (the repeats of a "
                "combination; the world-size-1 strategies) are reported as noisy",
                between(1e-6, 10))
        .option("until_tight", &CompareMeasure::until_tight,
                "auto-repeat: after `repeats` rounds, more rounds until every combination's steady step time has a "
                "relative range of at most this (0: off); bounded by max_repeats and budget_s",
                between(0, 10))
        .option("max_repeats", &CompareMeasure::max_repeats,
                "auto-repeat (until_tight or budget_s): the most rounds in all", between(1, 1000))
        .option("budget_s", &CompareMeasure::budget_s,
                "auto-repeat: rounds after `repeats` start only while the comparison would end within this many "
                "seconds of its start (0: no budget; with until_tight 0, rounds run until the budget or max_repeats)",
                between(0, detail::kMaxSeconds))
        .option("cpu_threads", &CompareMeasure::cpu_threads,
                "CPU runs: \"equal\" gives every rank the same intra-op threads at every world size (the host's "
                "hardware threads over the largest world size), so that scaling is measured as on GPUs, each of "
                "which brings its own compute; \"share\" divides the host's threads among each run's ranks. An "
                "experiment's own [train] threads wins",
                one_of({"equal", "share"}));
    return m;
  }();
  return schema;
}

}  // namespace

const SweepSchema& sweep_schema() {
  static const SweepSchema schema = [] {
    SweepSchema s;
    Schema<CompareOptions> options;
    options
        .option("base", &CompareOptions::base,
                "the experiment every run starts from (required); relative to the sweep file (to the working "
                "directory in a --set)")
        .option("scaling", &CompareOptions::scaling,
                "strong: every run has the base global batch; weak: the batch per rank stays the baseline's, so "
                "the global batch grows with the world size",
                one_of({"strong", "weak"}))
        .option("repeats", &CompareOptions::repeats,
                "rounds: runs per combination, round r of every combination (in a shuffled order) before round "
                "r + 1; the tables show median (min-max)",
                between(1, 100));
    s.options = options.erased();
    for (const auto& spec : measure_schema().erased().specs) s.options.specs.push_back(spec);
    s.tables = {
        {"baseline", "table", "single (else the first strategy) at the smallest world_size",
         "the run speedup and efficiency are measured against, as axis values: { strategy = \"single\", "
         "world_size = 1 }; an axis it leaves out takes each run's own value"},
        {"axes", "table", "{} (one run)",
         "[compare.axes]: the cross product of these arrays is run, the first axis outermost"},
        {"set", "table", "{}", "[compare.set]: \"section.key\" = value, applied to every run"}};
    Schema<CompareAxes> axes;
    axes.option("strategy", &CompareAxes::strategy,
                "strategies to run (names that `strata plugins` lists); each run's strategy.name")
        .option("world_size", &CompareAxes::world_size,
                "devices per run: distributed.nproc for a rank per device, dp's replicas in one process; single "
                "runs at 1 only",
                between(1, 4096));
    s.axes = axes.erased();
    s.any_axis = {"\"section.key\"", "array", "",
                  "any experiment key, e.g. \"optimizer.lr\" = [1e-3, 3e-4] (optimizer.lr = [...] alike)"};
    s.any_set = {"\"section.key\"", "any", "", "an experiment key and its value for every run, e.g. \"train.steps\" = 50"};
    s.overrides =
        "--set on `strata compare` and `strata validate` of a sweep: a key under compare. changes the sweep "
        "(compare.repeats=3, compare.axes.world_size=[1,2], 'compare.axes.\"optimizer.lr\"=[0.1]', "
        "compare.baseline.world_size=2; an axis replaced keeps its place, a new one comes last); any other key "
        "(train.steps=5) is applied to every run, after [compare.set]. `strata compare --until-tight REL "
        "--max-repeats N --budget SECONDS` are compare.until_tight, compare.max_repeats and compare.budget_s.";
    return s;
  }();
  return schema;
}

namespace {

std::vector<std::string> compare_keys() {
  std::vector<std::string> keys;
  for (const auto& spec : sweep_schema().options.specs) keys.push_back(spec.name);
  for (const auto& table : sweep_schema().tables) keys.push_back(table.name);
  return keys;
}

/// Positions in the sweep file, or, while an override is applied, that override ("--set TEXT").
class SweepReader {
 public:
  explicit SweepReader(const fs::path& file) : label_(file.string()) {}

  /// Positions are `origin`'s until reading(std::nullopt).
  void reading(std::optional<SourceLocation> origin) { origin_ = std::move(origin); }
  bool reading_override() const { return origin_.has_value(); }

  SourceLocation at(const toml::node* node) const {
    if (origin_) return *origin_;
    if (node && node->source().begin.line != 0)
      return {label_, node->source().begin.line, node->source().begin.column};
    return {label_, 1, 1};
  }
  SourceLocation at(const toml::key& key) const {
    if (origin_) return *origin_;
    if (key.source().begin.line != 0) return {label_, key.source().begin.line, key.source().begin.column};
    return {label_, 1, 1};
  }
  [[noreturn]] void fail(const toml::node* node, const std::string& key, const std::string& message,
                         std::string fix = {}) const {
    throw ConfigError(at(node), key, message, std::move(fix));
  }

  /// Leaves of a table as dotted keys: `"optimizer.lr" = x` and `optimizer.lr = x` alike, in
  /// file order.
  std::vector<std::pair<std::string, const toml::node*>> flatten(const toml::table& table,
                                                                  const std::string& prefix) const {
    std::vector<std::pair<std::string, const toml::node*>> out;
    for (const auto& [key, node] : table) {
      const std::string path = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
      if (const auto* sub = node.as_table()) {
        auto inner = flatten(*sub, path);
        out.insert(out.end(), inner.begin(), inner.end());
      } else {
        out.emplace_back(path, &node);
      }
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
      const auto& sa = a.second->source().begin;
      const auto& sb = b.second->source().begin;
      return std::tie(sa.line, sa.column) < std::tie(sb.line, sb.column);
    });
    return out;
  }

  /// The leaves under `prefix`: a table's, or the one value.
  std::vector<std::pair<std::string, const toml::node*>> entries(const toml::node& node, const std::string& prefix) const {
    if (const auto* table = node.as_table()) return flatten(*table, prefix);
    return {{prefix, &node}};
  }

  /// TOML text of a value, floats in their shortest round-trip form (0.1, not
  /// 0.10000000000000001): the options' own to_toml for scalars.
  static std::string toml_text(const toml::node& node) {
    if (const auto* f = node.as_floating_point()) return to_toml(f->get());
    if (const auto* str = node.as_string()) return to_toml(str->get());
    if (const auto* array = node.as_array()) {
      std::string text = "[";
      for (std::size_t i = 0; i < array->size(); ++i) text.append(i ? ", " : "").append(toml_text(*array->get(i)));
      return text + "]";
    }
    std::ostringstream text;
    node.visit([&](auto&& n) { text << n; });
    return text.str();
  }

  SweepValue value_of(const toml::node& node) const {
    SweepValue v;
    v.where = at(&node);
    v.toml = toml_text(node);
    v.display = node.is_string() ? node.as_string()->get() : v.toml;
    return v;
  }

 private:
  std::string label_;
  std::optional<SourceLocation> origin_;
};

/// The axis key that takes over a core key, for keys a sweep must not set directly.
std::string reserved_key_hint(const std::string& key) {
  if (key == "strategy.name") return "strategy";
  if (key == "distributed.nproc") return "world_size";
  return {};
}

/// The parts of an override's key, TOML's quoting understood (compare.axes."optimizer.lr" ->
/// compare, axes, optimizer.lr); nullopt when it is not a TOML key.
std::optional<std::vector<std::string>> key_parts(const std::string& key, const SourceLocation& where) {
  const std::string text = key + " = 0";
  detail::check_key_depth(text, where.file);
  toml::table parsed;
  try {
    parsed = toml::parse(text);
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
  std::vector<std::string> parts;
  const toml::table* table = &parsed;
  while (table && table->size() == 1) {
    const toml::table* inner = nullptr;
    for (const auto& [k, node] : *table) {  // its one entry (an iterator's pair dies with it)
      parts.emplace_back(k.str());
      inner = node.as_table();
    }
    table = inner;
  }
  if (table) return std::nullopt;  // `a = 0` with a table for a value cannot come from one key
  return parts;
}

/// An override's value: TOML (50, 0.1, "x", [1, 2], { a = 1 }), else the text as a string.
toml::table parse_value(const std::string& raw) {
  try {
    return toml::parse("v = " + raw);
  } catch (const toml::parse_error&) {
    return toml::table{{"v", raw}};
  }
}

/// Builds a Sweep from the file's [compare] table, then from the command line's overrides, each
/// entry validated as it comes; finish() checks across entries.
class SweepBuilder {
 public:
  explicit SweepBuilder(const fs::path& file) : r_(file) { sweep_.file = file; }

  /// A key of [compare] and its value: an option, or a whole table (axes, set, baseline).
  void entry(const std::string& name, const toml::node& node) {
    if (const OptionSpec* spec = sweep_schema().options.find(name)) return option(*spec, node);
    const auto* table = node.as_table();
    if (name == "axes") {
      if (!table) r_.fail(&node, "compare.axes", "axes must be a table of key = [values].",
                          "Write [compare.axes] with strategy = [\"single\", \"ddp\"] and world_size = [1, 2].");
      sweep_.axes.clear();
      for (const auto& [key, value] : r_.flatten(*table, "")) axis(key, *value);
    } else if (name == "set") {
      if (!table) r_.fail(&node, "compare.set", "set must be a table of \"section.key\" = value.",
                          "Write [compare.set] with \"train.steps\" = 50.");
      sweep_.set.clear();
      for (const auto& [key, value] : r_.flatten(*table, "")) setting(key, *value);
    } else if (name == "baseline") {
      if (!table) r_.fail(&node, "compare.baseline", "baseline must be a table of axis values.",
                          "Write baseline = { strategy = \"single\", world_size = 1 }.");
      baseline_.clear();
      baseline_at_ = r_.at(&node);
      for (const auto& [key, value] : r_.flatten(*table, "")) baseline(key, *value);
    }
  }

  /// A `--set` of the command line: a key under compare. changes the sweep, any other key is
  /// applied to every run.
  void apply(const std::string& text) {
    const SourceLocation where{"--set " + text, 0, 0};
    const auto eq = text.find('=');
    const std::string fix = "Write for example `--set train.steps=50` (every run) or `--set compare.repeats=3` (the "
                            "sweep); `strata describe compare` lists the sweep's keys.";
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(where, "", "an override must look like section.key=value.", fix);
    const std::string key_text = text.substr(0, eq);
    const auto parts = key_parts(key_text, where);
    const bool sweep_key = parts ? parts->front() == "compare" : key_text.rfind("compare", 0) == 0;
    if (!sweep_key) {
      // As [compare.set]'s "section.key" = value: the value's text goes to each run's --set.
      std::string key = key_text;
      if (parts) key = detail::join(*parts, ".");
      if (key.find('.') == std::string::npos)
        throw ConfigError(where, key, "an override must look like section.key=value.", fix);
      replace_or_append(sweep_.set, SweepOverride{key, text.substr(eq + 1), where});
      return;
    }
    if (!parts)
      throw ConfigError(where, key_text, "the key of this override is not a TOML key.",
                        "Quote a part that holds dots: `--set 'compare.axes.\"optimizer.lr\"=[0.1]'`.");
    if (parts->size() < 2)
      throw ConfigError(where, "compare", "an override changes one key of [compare], not the whole table.",
                        "Write for example `--set compare.repeats=3` or `--set compare.axes.world_size=[1,2]`.");
    detail::check_key_depth(text.substr(eq + 1), where.file);
    const toml::table parsed = parse_value(text.substr(eq + 1));
    const toml::node& value = *parsed.get("v");
    const std::string& name = (*parts)[1];
    const std::string path = "compare." + name;
    const auto known = compare_keys();
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw ConfigError(where, path,
                        fmt::format("unknown key '{}' in [compare].{} Known keys: {}.", detail::shown(name),
                                    detail::did_you_mean(name, known), detail::join(known)),
                        "Correct the key; `strata describe compare` lists them.");
    r_.reading(where);
    if (parts->size() == 2) {
      entry(name, value);
    } else {
      const std::string rest = detail::join(std::vector<std::string>(parts->begin() + 2, parts->end()), ".");
      if (name == "axes") {
        for (const auto& [key, node] : r_.entries(value, rest)) axis(key, *node);
      } else if (name == "set") {
        for (const auto& [key, node] : r_.entries(value, rest)) setting(key, *node);
      } else if (name == "baseline") {
        if (!baseline_at_) baseline_at_ = where;
        for (const auto& [key, node] : r_.entries(value, rest)) baseline(key, *node);
      } else {
        throw ConfigError(where, path, fmt::format("'{}' is a value, not a table.", path),
                          fmt::format("Write `--set {}=VALUE`.", path));
      }
    }
    r_.reading(std::nullopt);
  }

  /// The checks across entries, and the defaults of what was not given. `compare` is the
  /// [compare] table (positions of what it lacks).
  Sweep finish(const toml::node& compare) {
    if (sweep_.base.empty())
      r_.fail(&compare, "compare.base", "[compare] needs base, the experiment every run starts from.",
              "Add base = \"experiment.toml\" (relative to this file).");
    std::error_code ec;
    if (!fs::is_regular_file(sweep_.base, ec))
      throw ConfigError(sweep_.base_at, "compare.base", "base experiment \"" + sweep_.base.string() + "\" not found.",
                        "The path is relative to the sweep file's directory (to the working directory in a --set).");
    if (!scaling_given_) sweep_.scaling_at = r_.at(&compare);
    for (const auto& o : sweep_.set)
      for (const auto& axis : sweep_.axes) {
        if (axis.key == o.key)
          throw ConfigError(o.where, o.key, fmt::format("'{}' is both an axis and a fixed setting.", o.key),
                            "Keep it in one place: an axis with one value, or [compare.set].");
        if (axis.key == reserved_key_hint(o.key))
          throw ConfigError(o.where, o.key, fmt::format("'{}' is set per run by the axis '{}'.", o.key, axis.key),
                            fmt::format("Change the axis instead: `--set compare.axes.{}=[...]`.", axis.key));
      }
    sweep_.measure = measure_schema().bind(measure_);
    if (sweep_.auto_repeat() && sweep_.measure.max_repeats < sweep_.repeats) {
      const auto at = measure_at_.find("max_repeats");
      throw ConfigError(at != measure_at_.end() ? at->second : repeats_at_.value_or(r_.at(&compare)),
                        "compare.max_repeats",
                        fmt::format("max_repeats {} is below repeats {}: the auto-repeat mode (until_tight, "
                                    "budget_s) adds rounds after the first `repeats`, up to max_repeats in all.",
                                    sweep_.measure.max_repeats, sweep_.repeats),
                        fmt::format("Raise max_repeats to at least {} (--max-repeats N), or lower repeats.", sweep_.repeats));
    }
    sweep_.baseline_at = baseline_at_.value_or(r_.at(&compare));
    if (baseline_at_) {
      for (const auto& [key, value] : baseline_) check_baseline(key, value);
      for (const auto& [key, value] : baseline_) sweep_.baseline.emplace_back(key, value.display);
    } else {
      // Default: single (else the first strategy) at the smallest world size.
      for (const auto& axis : sweep_.axes) {
        if (axis.key == "strategy") {
          auto single = std::find_if(axis.values.begin(), axis.values.end(),
                                     [](const SweepValue& v) { return v.display == "single"; });
          sweep_.baseline.emplace_back("strategy", single != axis.values.end() ? single->display : axis.values[0].display);
        } else if (axis.key == "world_size") {
          auto smallest = std::min_element(axis.values.begin(), axis.values.end(), [](const auto& a, const auto& b) {
            return std::stoll(a.display) < std::stoll(b.display);
          });
          sweep_.baseline.emplace_back("world_size", smallest->display);
        }
      }
    }
    return std::move(sweep_);
  }

 private:
  template <class T>
  static void replace_or_append(std::vector<T>& list, T item) {
    auto it = std::find_if(list.begin(), list.end(), [&](const T& x) { return x.key == item.key; });
    if (it != list.end()) *it = std::move(item);
    else list.push_back(std::move(item));
  }

  /// An option of [compare] (base, scaling, repeats, a CompareMeasure key), validated by its spec
  /// in sweep_schema().
  void option(const OptionSpec& spec, const toml::node& node) {
    const std::string path = "compare." + spec.name;
    const auto value_of = [&]() -> std::optional<OptionValue> {
      switch (spec.type) {
        case OptionType::kString: if (node.is_string()) return node.as_string()->get(); break;
        case OptionType::kInt: if (node.is_integer()) return node.as_integer()->get(); break;
        case OptionType::kBool: if (node.is_boolean()) return node.as_boolean()->get(); break;
        case OptionType::kFloat:
          if (node.is_integer()) return static_cast<double>(node.as_integer()->get());
          if (node.is_floating_point()) return node.as_floating_point()->get();
          break;
        default: break;
      }
      return std::nullopt;
    };
    const auto given = value_of();
    if (!given) {
      const std::string type = spec.type == OptionType::kFloat ? "number" : type_name(spec.type);
      r_.fail(&node, path, fmt::format("{} must be {} {}.", spec.name, type.find_first_of("aeiou") == 0 ? "an" : "a", type),
              fmt::format("Write {} = {}.", spec.name, spec.name == "base" ? "\"experiment.toml\"" : to_toml(spec.default_value)));
    }
    const OptionValue& value = *given;
    if (auto problem = spec.check(value); !problem.empty())
      r_.fail(&node, path, fmt::format("{} {}{}", spec.name, problem, problem.back() == '.' || problem.back() == '?' ? "" : "."),
              spec.name == "scaling"
                  ? "strong: every run has the base global batch; weak: the batch per rank stays that of the baseline."
                  : fmt::format("Use a value that is {}.", spec.constraint_text()));
    if (spec.name == "base") {
      const fs::path base = std::get<std::string>(value);
      if (base.empty()) r_.fail(&node, path, "base must name an experiment file.", "Write base = \"experiment.toml\".");
      // The file's paths are relative to it; a --set's to the working directory, where it was typed.
      const fs::path dir = r_.reading_override() || !sweep_.file.has_parent_path() ? fs::path() : sweep_.file.parent_path();
      sweep_.base = base.is_absolute() || dir.empty() ? base : dir / base;
      sweep_.base_at = r_.at(&node);
    } else if (spec.name == "scaling") {
      sweep_.scaling = std::get<std::string>(value);
      sweep_.scaling_at = r_.at(&node);
      scaling_given_ = true;
    } else if (spec.name == "repeats") {
      sweep_.repeats = std::get<std::int64_t>(value);
      repeats_at_ = r_.at(&node);
    } else {
      measure_.set(spec.name, value);  // bound to sweep_.measure in finish()
      measure_at_[spec.name] = r_.at(&node);
    }
  }

  /// One axis, in its place when it replaces one (a `--set`), else last.
  void axis(const std::string& key, const toml::node& node) {
    const std::string path = "compare.axes." + key;
    if (const auto hint = reserved_key_hint(key); !hint.empty())
      r_.fail(&node, path, fmt::format("'{}' is set by the axis '{}'.", key, hint),
              fmt::format("Write {} = [...] instead.", hint));
    const OptionSpec* spec = sweep_schema().axes.find(key);
    if (!spec && key.find('.') == std::string::npos)
      r_.fail(&node, path,
              fmt::format("axis '{}' is neither strategy, world_size nor a dotted experiment key.{}", key,
                          detail::did_you_mean(key, {"strategy", "world_size"})),
              "Name other axes by section and key, e.g. \"optimizer.lr\" = [0.01, 0.001].");
    const auto* array = node.as_array();
    if (!array || array->empty())
      r_.fail(&node, path, fmt::format("axis '{}' must be a non-empty array of values.", key),
              fmt::format("Write {} = [a, b].", key));
    SweepAxis axis;
    axis.key = key;
    axis.where = r_.at(&node);
    std::set<std::string> seen;
    for (const auto& element : *array) {
      if (key == "strategy" && !element.is_string())
        r_.fail(&element, path, "strategy values must be strategy names (strings).", "Write strategy = [\"single\", \"ddp\"].");
      if (key == "world_size") {
        const std::string problem = element.is_integer() ? spec->check(element.as_integer()->get()) : "must be an integer";
        if (!problem.empty())
          r_.fail(&element, path, fmt::format("world_size values must be positive integers: each {}.", problem),
                  "Write world_size = [1, 2, 4].");
      }
      if (element.is_table())
        r_.fail(&element, path, "axis values must be values, not tables.", "Write key = [value, value].");
      auto value = r_.value_of(element);
      if (!seen.insert(value.toml).second)
        r_.fail(&element, path, fmt::format("value {} appears twice in axis '{}'.", value.display, key),
                "List each value once.");
      axis.values.push_back(std::move(value));
    }
    replace_or_append(sweep_.axes, std::move(axis));
  }

  /// One "section.key" = value of [compare.set].
  void setting(const std::string& key, const toml::node& node) {
    const std::string path = "compare.set." + key;
    if (key.find('.') == std::string::npos)
      r_.fail(&node, path, fmt::format("'{}' is not a section.key.", key), "Write \"train.steps\" = 50.");
    if (const auto hint = reserved_key_hint(key); !hint.empty())
      r_.fail(&node, path, fmt::format("'{}' is set per run by the axis '{}'.", key, hint),
              fmt::format("Give it as [compare.axes] {} = [...].", hint));
    const auto value = r_.value_of(node);
    replace_or_append(sweep_.set, SweepOverride{key, value.toml, value.where});
  }

  /// One axis value of the baseline, checked against the axes in finish().
  void baseline(const std::string& key, const toml::node& node) {
    auto value = r_.value_of(node);
    auto it = std::find_if(baseline_.begin(), baseline_.end(), [&](const auto& b) { return b.first == key; });
    if (it != baseline_.end()) it->second = std::move(value);
    else baseline_.emplace_back(key, std::move(value));
  }

  void check_baseline(const std::string& key, const SweepValue& value) const {
    const std::string path = "compare.baseline." + key;
    const auto axis = std::find_if(sweep_.axes.begin(), sweep_.axes.end(), [&](const SweepAxis& a) { return a.key == key; });
    std::vector<std::string> axis_keys;
    for (const auto& a : sweep_.axes) axis_keys.push_back(a.key);
    if (axis == sweep_.axes.end())
      throw ConfigError(value.where, path,
                        fmt::format("baseline names '{}', which is not an axis.{} Axes: {}.", key,
                                    detail::did_you_mean(key, axis_keys),
                                    axis_keys.empty() ? std::string("none") : detail::join(axis_keys)),
                        "Name each baseline key after an axis of [compare.axes].");
    std::vector<std::string> displays;
    for (const auto& v : axis->values) displays.push_back(v.display);
    if (std::find(displays.begin(), displays.end(), value.display) == displays.end())
      throw ConfigError(value.where, path,
                        fmt::format("baseline {} = {} is not among the axis values ({}).", key, value.display,
                                    detail::join(displays)),
                        "Choose the baseline among the values that are run (`--set compare.baseline." + key +
                            "=VALUE` changes it from the command line).");
  }

  SweepReader r_;
  Sweep sweep_;
  bool scaling_given_ = false;
  std::optional<SourceLocation> repeats_at_;
  Options measure_;                                     ///< CompareMeasure's keys as given
  std::map<std::string, SourceLocation> measure_at_;    ///< where each was given
  std::vector<std::pair<std::string, SweepValue>> baseline_;
  std::optional<SourceLocation> baseline_at_;  ///< set when a baseline was given
};

/// The sweep file's TOML: read with the experiment file's limits, syntax errors at their position.
toml::table parse_sweep_text(const fs::path& file) {
  const std::string text = detail::read_experiment_text(file);
  detail::check_key_depth(text, file.string());
  try {
    return toml::parse(text, file.string());
  } catch (const toml::parse_error& err) {
    throw ConfigError({file.string(), err.source().begin.line, err.source().begin.column}, "",
                      detail::shown(std::string(err.description()), 400) + ".", "Fix the TOML syntax at this position.");
  }
}

}  // namespace

bool is_sweep_file(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return false;
  try {
    return parse_sweep_text(file).get_as<toml::table>("compare") != nullptr;
  } catch (const ConfigError&) {
    return false;  // validated as an experiment, which reports it
  }
}

Sweep parse_sweep(const fs::path& file, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw ConfigError({file.string(), 0, 0}, "", "sweep file not found.",
                      "Check the path; experiments/compare_strategies.toml is a working example.");
  const toml::table root = parse_sweep_text(file);
  SweepReader r(file);
  for (const auto& [key, node] : root)
    if (key.str() != "compare")
      throw ConfigError(r.at(key), std::string(key.str()),
                        fmt::format("a sweep file holds only a [compare] table; found '{}'.", detail::shown(std::string(key.str()))),
                        "Put experiment settings in the base experiment, or in [compare.set] as \"section.key\" = value.");
  const auto* compare = root.get_as<toml::table>("compare");
  if (!compare)
    throw ConfigError({file.string(), 1, 1}, "compare", "no [compare] table.",
                      "Start the file with [compare] and base = \"experiment.toml\".");
  const auto known = compare_keys();
  for (const auto& [key, node] : *compare) {
    const std::string name(key.str());
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw ConfigError(r.at(key), "compare." + name,
                        fmt::format("unknown key '{}' in [compare].{} Known keys: {}.", detail::shown(name),
                                    detail::did_you_mean(name, known), detail::join(known)),
                        "Correct or remove the key; `strata describe compare` lists the keys.");
  }
  SweepBuilder builder(file);
  for (const auto& spec : sweep_schema().options.specs)
    if (const auto* node = compare->get(spec.name)) builder.entry(spec.name, *node);
  for (const char* name : {"axes", "set", "baseline"})
    if (const auto* node = compare->get(name)) builder.entry(name, *node);
  for (const auto& o : overrides) builder.apply(o);
  return builder.finish(*compare);
}

}  // namespace strata
