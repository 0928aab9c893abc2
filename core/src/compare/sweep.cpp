#include "compare/sweep.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "strata/options.hpp"
#include "strata/registry.hpp"
#include "text/suggest.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kCompareKeys = {"base", "scaling", "repeats", "baseline", "axes", "set"};

class SweepReader {
 public:
  explicit SweepReader(const fs::path& file) : label_(file.string()) {}

  SourceLocation at(const toml::node* node) const {
    if (node && node->source().begin.line != 0)
      return {label_, node->source().begin.line, node->source().begin.column};
    return {label_, 1, 1};
  }
  SourceLocation at(const toml::key& key) const {
    if (key.source().begin.line != 0) return {label_, key.source().begin.line, key.source().begin.column};
    return {label_, 1, 1};
  }
  [[noreturn]] void fail(const toml::node* node, const std::string& key, const std::string& message,
                         std::string fix = {}) const {
    throw ConfigError(at(node), key, message, std::move(fix));
  }

  /// [compare] `key` as a table (nullptr when absent); anything else fails with `message` and `fix`.
  const toml::table* table_at(const toml::table& compare, const char* key, const std::string& message,
                              const std::string& fix) const {
    const auto* node = compare.get(key);
    if (!node) return nullptr;
    if (!node->is_table()) fail(node, std::string("compare.") + key, message, fix);
    return node->as_table();
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

  static SweepValue value_of(const toml::node& node, SourceLocation where) {
    SweepValue v;
    v.where = std::move(where);
    v.toml = toml_text(node);
    v.display = node.is_string() ? node.as_string()->get() : v.toml;
    return v;
  }

 private:
  std::string label_;
};

/// "key=value" from the command line as an override of every run.
SweepOverride command_line_override(const std::string& text) {
  const auto eq = text.find('=');
  const SourceLocation where{"--set " + text, 0, 0};
  if (eq == std::string::npos || eq == 0 || text.find('.') > eq)
    throw ConfigError(where, "", "an override must look like section.key=value.",
                      "Write for example `--set train.steps=50`.");
  return {text.substr(0, eq), text.substr(eq + 1), where};
}

/// The axis key that takes over a core key, for keys a sweep must not set directly.
std::string reserved_key_hint(const std::string& key) {
  if (key == "strategy.name") return "strategy";
  if (key == "distributed.nproc") return "world_size";
  return {};
}

std::string sanitize(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (ok) out += c;
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "x" : out;
}

}  // namespace

Sweep parse_sweep(const fs::path& file, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw ConfigError({file.string(), 0, 0}, "", "sweep file not found.",
                      "Check the path; experiments/compare_strategies.toml is a working example.");
  toml::table root;
  try {
    root = toml::parse_file(file.string());
  } catch (const toml::parse_error& err) {
    throw ConfigError({file.string(), err.source().begin.line, err.source().begin.column}, "",
                      std::string(err.description()) + ".", "Fix the TOML syntax at this position.");
  }
  SweepReader r(file);
  Sweep sweep;
  sweep.file = file;
  for (const auto& [key, node] : root)
    if (key.str() != "compare")
      throw ConfigError(r.at(key), std::string(key.str()),
             fmt::format("a sweep file holds only a [compare] table; found '{}'.", key.str()),
             "Put experiment settings in the base experiment, or in [compare.set] as \"section.key\" = value.");
  const auto* compare = root.get_as<toml::table>("compare");
  if (!compare)
    throw ConfigError({file.string(), 1, 1}, "compare", "no [compare] table.",
                      "Start the file with [compare] and base = \"experiment.toml\".");
  for (const auto& [key, node] : *compare) {
    const std::string name(key.str());
    if (std::find(kCompareKeys.begin(), kCompareKeys.end(), name) == kCompareKeys.end())
      throw ConfigError(r.at(key), "compare." + name,
                        fmt::format("unknown key '{}' in [compare].{} Known keys: {}.", name,
                                    detail::did_you_mean(name, kCompareKeys), detail::join(kCompareKeys)),
                        "Correct or remove the key; `strata compare --help` shows the sweep format.");
  }

  // base
  const auto* base = compare->get("base");
  if (!base) r.fail(compare, "compare.base", "[compare] needs base, the experiment every run starts from.",
                    "Add base = \"experiment.toml\" (relative to this file).");
  if (!base->is_string()) r.fail(base, "compare.base", "base must be a string (a path to an experiment file).",
                                 "Write base = \"experiment.toml\" (relative to this file).");
  const fs::path base_path = base->as_string()->get();
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  sweep.base = base_path.is_absolute() ? base_path : dir / base_path;
  sweep.base_at = r.at(base);
  if (!fs::is_regular_file(sweep.base, ec))
    r.fail(base, "compare.base", "base experiment \"" + sweep.base.string() + "\" not found.",
           "The path is relative to the sweep file's directory.");

  // scaling, repeats
  sweep.scaling_at = r.at(compare);
  if (const auto* s = compare->get("scaling")) {
    sweep.scaling_at = r.at(s);
    if (!s->is_string() || (s->as_string()->get() != "strong" && s->as_string()->get() != "weak"))
      r.fail(s, "compare.scaling", "scaling must be \"strong\" or \"weak\".",
             "strong: every run has the base global batch; weak: the batch per rank stays that of the baseline.");
    sweep.scaling = s->as_string()->get();
  }
  if (const auto* n = compare->get("repeats")) {
    if (!n->is_integer() || n->as_integer()->get() < 1 || n->as_integer()->get() > 100)
      r.fail(n, "compare.repeats", "repeats must be an integer from 1 to 100.", "Write repeats = 3.");
    sweep.repeats = n->as_integer()->get();
  }

  // axes
  if (const auto* axes = r.table_at(*compare, "axes", "axes must be a table of key = [values].",
                                    "Write [compare.axes] with strategy = [\"single\", \"ddp\"] and world_size = [1, 2].")) {
    for (const auto& [key, node] : r.flatten(*axes, "")) {
      const std::string path = "compare.axes." + key;
      if (const auto hint = reserved_key_hint(key); !hint.empty())
        r.fail(node, path, fmt::format("'{}' is set by the axis '{}'.", key, hint),
               fmt::format("Write {} = [...] instead.", hint));
      if (key != "strategy" && key != "world_size" && key.find('.') == std::string::npos)
        r.fail(node, path,
               fmt::format("axis '{}' is neither strategy, world_size nor a dotted experiment key.{}", key,
                           detail::did_you_mean(key, {"strategy", "world_size"})),
               "Name other axes by section and key, e.g. \"optimizer.lr\" = [0.01, 0.001].");
      const auto* array = node->as_array();
      if (!array || array->empty())
        r.fail(node, path, fmt::format("axis '{}' must be a non-empty array of values.", key),
               fmt::format("Write {} = [a, b].", key));
      SweepAxis axis;
      axis.key = key;
      axis.where = r.at(node);
      std::set<std::string> seen;
      for (const auto& element : *array) {
        const SourceLocation where = r.at(&element);
        if (key == "strategy" && !element.is_string())
          r.fail(&element, path, "strategy values must be strategy names (strings).", "Write strategy = [\"single\", \"ddp\"].");
        if (key == "world_size" && (!element.is_integer() || element.as_integer()->get() < 1 ||
                                    element.as_integer()->get() > 4096))
          r.fail(&element, path, "world_size values must be positive integers.", "Write world_size = [1, 2, 4].");
        if (element.is_table())
          r.fail(&element, path, "axis values must be values, not tables.", "Write key = [value, value].");
        auto value = SweepReader::value_of(element, where);
        if (!seen.insert(value.toml).second)
          r.fail(&element, path, fmt::format("value {} appears twice in axis '{}'.", value.display, key),
                 "List each value once.");
        axis.values.push_back(std::move(value));
      }
      sweep.axes.push_back(std::move(axis));
    }
  }

  // set
  if (const auto* set = r.table_at(*compare, "set", "set must be a table of \"section.key\" = value.",
                                   "Write [compare.set] with \"train.steps\" = 50.")) {
    for (const auto& [key, node] : r.flatten(*set, "")) {
      const std::string path = "compare.set." + key;
      if (key.find('.') == std::string::npos)
        r.fail(node, path, fmt::format("'{}' is not a section.key.", key), "Write \"train.steps\" = 50.");
      if (const auto hint = reserved_key_hint(key); !hint.empty())
        r.fail(node, path, fmt::format("'{}' is set per run by the axis '{}'.", key, hint),
               fmt::format("Give it as [compare.axes] {} = [...].", hint));
      const auto value = SweepReader::value_of(*node, r.at(node));
      sweep.set.push_back({key, value.toml, value.where});
    }
  }
  for (const auto& o : overrides) sweep.set.push_back(command_line_override(o));
  for (const auto& o : sweep.set)
    for (const auto& axis : sweep.axes)
      if (axis.key == o.key)
        throw ConfigError(o.where, o.key, fmt::format("'{}' is both an axis and a fixed setting.", o.key),
                          "Keep it in one place: an axis with one value, or [compare.set].");

  // baseline
  sweep.baseline_at = r.at(compare);
  if (const auto* table = r.table_at(*compare, "baseline", "baseline must be a table of axis values.",
                                     "Write baseline = { strategy = \"single\", world_size = 1 }.")) {
    sweep.baseline_at = r.at(table);
    for (const auto& [key, node] : r.flatten(*table, "")) {
      const auto axis = std::find_if(sweep.axes.begin(), sweep.axes.end(), [&](const SweepAxis& a) { return a.key == key; });
      std::vector<std::string> axis_keys;
      for (const auto& a : sweep.axes) axis_keys.push_back(a.key);
      if (axis == sweep.axes.end())
        r.fail(node, "compare.baseline." + key,
               fmt::format("baseline names '{}', which is not an axis.{} Axes: {}.", key, detail::did_you_mean(key, axis_keys),
                           axis_keys.empty() ? std::string("none") : detail::join(axis_keys)),
               "Name each baseline key after an axis of [compare.axes].");
      const auto value = SweepReader::value_of(*node, r.at(node));
      std::vector<std::string> displays;
      for (const auto& v : axis->values) displays.push_back(v.display);
      if (std::find(displays.begin(), displays.end(), value.display) == displays.end())
        r.fail(node, "compare.baseline." + key,
               fmt::format("baseline {} = {} is not among the axis values ({}).", key, value.display,
                           detail::join(displays)),
               "Choose the baseline among the values that are run.");
      sweep.baseline.emplace_back(key, value.display);
    }
  } else {
    // Default: single (else the first strategy) at the smallest world size.
    for (const auto& axis : sweep.axes) {
      if (axis.key == "strategy") {
        auto single = std::find_if(axis.values.begin(), axis.values.end(),
                                   [](const SweepValue& v) { return v.display == "single"; });
        sweep.baseline.emplace_back("strategy", single != axis.values.end() ? single->display : axis.values[0].display);
      } else if (axis.key == "world_size") {
        auto smallest = std::min_element(axis.values.begin(), axis.values.end(), [](const auto& a, const auto& b) {
          return std::stoll(a.display) < std::stoll(b.display);
        });
        sweep.baseline.emplace_back("world_size", smallest->display);
      }
    }
  }
  return sweep;
}

std::optional<std::vector<std::pair<std::string, std::string>>> world_overrides(const Placement& placement,
                                                                                 int world) {
  using Kind = Placement::Kind;
  if (placement.kind == Kind::kOneDevice && world != 1) return std::nullopt;
  std::vector<std::pair<std::string, std::string>> sets{
      {"distributed.nproc", std::to_string(placement.kind == Kind::kRankPerDevice ? world : 1)}};
  if (placement.kind == Kind::kDevicesInProcess)
    sets.emplace_back("strategy." + placement.devices_option, std::to_string(world));
  return sets;
}

SweepPlan plan_sweep(const Sweep& sweep, const Registry& registry, const std::string& base_strategy,
                     int base_world_size, std::int64_t base_global_batch) {
  SweepPlan plan;
  const SweepAxis* world_axis = nullptr;
  const SweepAxis* batch_axis = nullptr;
  for (const auto& axis : sweep.axes) {
    if (axis.key == "world_size") world_axis = &axis;
    if (axis.key == "train.global_batch_size") batch_axis = &axis;
  }
  plan.baseline_world_size = base_world_size;
  for (const auto& [key, value] : sweep.baseline)
    if (key == "world_size") plan.baseline_world_size = static_cast<int>(std::stoll(value));
  if (sweep.scaling == "weak" && batch_axis)
    throw ConfigError(batch_axis->where, "compare.axes.train.global_batch_size",
                      "weak scaling derives each run's global batch; it cannot also be an axis.",
                      "Use scaling = \"strong\" to sweep the global batch, or drop the axis.");

  // Strategies named by the axis must exist (checked at the value's position).
  for (const auto& axis : sweep.axes) {
    if (axis.key != "strategy") continue;
    for (const auto& v : axis.values)
      if (!registry.find(PluginKind::kStrategy, v.display)) {
        const auto known = registry.names(PluginKind::kStrategy);
        throw ConfigError(v.where, "compare.axes.strategy",
                          fmt::format("unknown strategy '{}'.{} Available: {}.", v.display,
                                      detail::did_you_mean(v.display, known), detail::join(known)),
                          "Run `strata plugins` to list the strategies found on the plugin search path.");
      }
  }

  // Cross product, the first axis outermost.
  std::vector<std::size_t> index(sweep.axes.size(), 0);
  while (true) {
    SweepRun run;
    run.strategy = base_strategy;
    run.world_size = base_world_size;
    const SweepValue* world_value = nullptr;
    for (std::size_t a = 0; a < sweep.axes.size(); ++a) {
      const auto& axis = sweep.axes[a];
      const auto& v = axis.values[index[a]];
      run.values.emplace_back(axis.key, v.display);
      if (axis.key == "strategy") run.strategy = v.display;
      if (axis.key == "world_size") {
        run.world_size = static_cast<int>(std::stoll(v.display));
        world_value = &v;
      }
    }
    const auto add = [&](const std::string& key, const std::string& toml, const SourceLocation& where) {
      run.overrides.push_back(key + "=" + toml);
      run.origins.push_back(where);
    };
    for (const auto& o : sweep.set) add(o.key, o.toml, o.where);
    for (std::size_t a = 0; a < sweep.axes.size(); ++a) {
      const auto& axis = sweep.axes[a];
      const auto& v = axis.values[index[a]];
      if (axis.key == "strategy") add("strategy.name", v.toml, v.where);
      else if (axis.key != "world_size") add(axis.key, v.toml, v.where);
    }
    const SourceLocation world_at = world_value ? world_value->where : (world_axis ? world_axis->where : sweep.base_at);
    const auto& placement = registry.at(PluginKind::kStrategy, run.strategy).traits.placement;
    std::string label = sanitize(run.strategy) + "-w" + std::to_string(run.world_size);
    for (const auto& [key, display] : run.values)
      if (key != "strategy" && key != "world_size")
        label.append("-").append(sanitize(key.substr(key.rfind('.') + 1))).append(sanitize(display));
    const auto world_sets = world_overrides(placement, run.world_size);
    const bool applies = world_sets.has_value();
    if (applies)
      for (const auto& [key, value] : *world_sets) add(key, value, world_at);
    else
      plan.skipped.push_back(fmt::format("{} (strategy '{}' runs on one device)", label, run.strategy));
    if (applies && sweep.scaling == "weak") {
      const std::int64_t scaled = base_global_batch * run.world_size;
      if (scaled % plan.baseline_world_size != 0)
        throw ConfigError(sweep.scaling_at, "compare.scaling",
                          fmt::format("weak scaling: global batch {} x world size {} is not divisible by the baseline "
                                      "world size {}.",
                                      base_global_batch, run.world_size, plan.baseline_world_size),
                          "Choose a base global batch that is a multiple of the baseline world size.");
      add("train.global_batch_size", std::to_string(scaled / plan.baseline_world_size), sweep.scaling_at);
    }
    if (applies) {
      for (std::int64_t r = 1; r <= sweep.repeats; ++r) {
        SweepRun copy = run;
        copy.repeat = static_cast<int>(r);
        copy.label = sweep.repeats > 1 ? fmt::format("{}-r{}", label, r) : label;
        plan.runs.push_back(std::move(copy));
      }
    }
    // Next combination (odometer, last axis fastest); no axes: one run.
    bool done = true;
    for (std::size_t a = sweep.axes.size(); a-- > 0;) {
      if (++index[a] < sweep.axes[a].values.size()) {
        done = false;
        break;
      }
      index[a] = 0;
    }
    if (done) break;
  }

  // Every run needs its baseline among the runs.
  for (const auto& run : plan.runs) {
    auto values = run.values;
    for (auto& [key, display] : values)
      for (const auto& [bkey, bvalue] : sweep.baseline)
        if (key == bkey) display = bvalue;
    const bool found = std::any_of(plan.runs.begin(), plan.runs.end(), [&](const SweepRun& r) { return r.values == values; });
    if (!found)
      throw ConfigError(sweep.baseline_at, "compare.baseline",
                        fmt::format("the baseline of run {} is not run (it does not apply: {}).", run.label,
                                    detail::join(plan.skipped)),
                        "Choose a baseline that is among the runs, e.g. { strategy = \"single\", world_size = 1 }.");
  }
  return plan;
}

}  // namespace strata
