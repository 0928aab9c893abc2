#include "config/experiment.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "config/checks.hpp"
#include "config/schemas.hpp"
#include "text/suggest.hpp"

namespace strata {

namespace fs = std::filesystem;
// The core sections' schemas (config/schemas.hpp). Using-declarations, not a using-directive: in a
// unity build the next sources of the batch see them too.
using detail::checkpoint_schema;
using detail::distributed_schema;
using detail::eval_schema;
using detail::experiment_schema;
using detail::log_schema;
using detail::optimizer_schema;
using detail::plugins_schema;
using detail::precision_schema;
using detail::train_schema;

struct ExperimentDocument {
  toml::table root;
  std::string file_label;                         // the path as the user gave it
  std::map<std::string, SourceLocation> overrides;  // key path -> where it was set ("--set key=value")
};

namespace {

const std::vector<std::string> kPluginSections = {"model", "dataset", "strategy"};


// ---- TOML node helpers ----------------------------------------------------------------------

std::string describe_node(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return fmt::format("string \"{}\"", detail::shown(node.as_string()->get()));
    case toml::node_type::integer: return fmt::format("integer {}", node.as_integer()->get());
    case toml::node_type::floating_point: return fmt::format("float {}", node.as_floating_point()->get());
    case toml::node_type::boolean: return node.as_boolean()->get() ? "boolean true" : "boolean false";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

/// The `--set` that set `key_path` or something inside it ("" if none): an override of
/// `trian.steps` is where the unknown section `trian` came from.
std::optional<SourceLocation> override_of(const ExperimentDocument& doc, const std::string& key_path) {
  if (auto it = doc.overrides.find(key_path); it != doc.overrides.end()) return it->second;
  for (const auto& [path, origin] : doc.overrides)
    if (path.size() > key_path.size() && path.compare(0, key_path.size(), key_path) == 0 && path[key_path.size()] == '.')
      return origin;
  return std::nullopt;
}

class Validator {
 public:
  explicit Validator(const Experiment& e) : e_(e) {}

  SourceLocation at(const std::string& key_path, const toml::node* node) const {
    const auto& doc = *e_.document;
    if (auto origin = override_of(doc, key_path)) return *origin;
    if (node && node->source().begin.line != 0)
      return {doc.file_label, node->source().begin.line, node->source().begin.column};
    return e_.location(key_path);
  }

  [[noreturn]] void fail(const std::string& key_path, const toml::node* node, const std::string& message,
                         std::string fix = {}) const {
    throw ConfigError(at(key_path, node), key_path, message, std::move(fix));
  }

  OptionValue convert(const std::string& key_path, const toml::node& node, const OptionSpec& spec) const {
    auto expect = [&](const toml::node& n, const char* what) {
      fail(key_path, &n, fmt::format("expected {}, got {}.", what, describe_node(n)),
           fmt::format("Write `{} = <{}>`.", spec.name, type_name(spec.type)));
    };
    auto element = [&](const toml::node& n, OptionType t) -> OptionValue {
      switch (t) {
        case OptionType::kBool:
          if (!n.is_boolean()) expect(n, "a boolean (true or false)");
          return n.as_boolean()->get();
        case OptionType::kInt:
          if (!n.is_integer()) expect(n, "an integer");
          return n.as_integer()->get();
        case OptionType::kFloat:
          if (n.is_integer()) return static_cast<double>(n.as_integer()->get());
          if (!n.is_floating_point()) expect(n, "a number");
          return n.as_floating_point()->get();
        case OptionType::kString:
          if (!n.is_string()) expect(n, "a string");
          if (n.as_string()->get().find('\0') != std::string::npos)
            fail(key_path, &n, fmt::format("{} contains a NUL character (\"{}\").", spec.name,
                                           detail::shown(n.as_string()->get())),
                 "Remove the \\u0000 escape from the string.");
          return n.as_string()->get();
        default: return {};
      }
    };
    auto list = [&]<class T>(OptionType element_type) -> OptionValue {
      if (!node.is_array()) expect(node, type_name(spec.type));
      std::vector<T> out;
      for (const auto& item : *node.as_array()) out.push_back(std::get<T>(element(item, element_type)));
      return out;
    };
    OptionValue value;
    switch (spec.type) {
      case OptionType::kIntList: value = list.template operator()<std::int64_t>(OptionType::kInt); break;
      case OptionType::kFloatList: value = list.template operator()<double>(OptionType::kFloat); break;
      case OptionType::kStringList: value = list.template operator()<std::string>(OptionType::kString); break;
      default: value = element(node, spec.type);
    }
    if (auto problem = spec.check(value); !problem.empty())
      fail(key_path, &node, fmt::format("{} {}", spec.name, problem),
           spec.constraint_text().empty() ? std::string("Use a shorter value.")
                                          : fmt::format("Use a value that is {}.", spec.constraint_text()));
    if (spec.constraint.path) resolve_paths(key_path, value);
    return value;
  }

  /// Makes relative paths absolute: against the experiment's directory, or the working
  /// directory for a `--set` override (where a user typing a path means it).
  void resolve_paths(const std::string& key_path, OptionValue& value) const {
    const bool from_override = override_of(*e_.document, key_path).has_value();
    auto resolve = [&](std::string& p) {
      if (p.empty() || fs::path(p).is_absolute()) return;
      fs::path base = from_override ? fs::current_path() : fs::absolute(e_.directory());
      p = (base / p).lexically_normal().string();
    };
    if (auto* s = std::get_if<std::string>(&value)) resolve(*s);
    if (auto* v = std::get_if<std::vector<std::string>>(&value))
      for (auto& p : *v) resolve(p);
  }

  /// Validates every key of `table` against `schema` (except `reserved`); defaults fill the rest.
  Options section(const std::string& section, const toml::table* table, const OptionsSchema& schema,
                  const std::set<std::string>& reserved, const std::string& describe) const {
    Options out = schema.defaults();
    if (!table) return out;
    std::vector<std::string> known;
    for (const auto& s : schema.specs) known.push_back(s.name);
    for (const auto& [key, node] : *table) {
      const std::string name(key.str());
      const std::string path = section + "." + name;
      if (reserved.count(name)) continue;
      const OptionSpec* spec = schema.find(name);
      if (!spec) {
        SourceLocation where = at(path, &node);
        if (key.source().begin.line != 0 && !e_.document->overrides.count(path))
          where = {e_.document->file_label, key.source().begin.line, key.source().begin.column};
        throw ConfigError(where, path,
                          fmt::format("unknown key '{}' in [{}].{} Known keys: {}.", detail::shown(name), section,
                                      detail::did_you_mean(name, known), known.empty() ? "none" : detail::join(known)),
                          fmt::format("Remove or correct it; `strata describe {}` lists the options.", describe));
      }
      out.set(name, convert(path, node, *spec));
    }
    return out;
  }

 private:
  const Experiment& e_;
};

const toml::table* table_of(const toml::table& root, const std::string& name) { return root.get_as<toml::table>(name); }

// ---- overrides --------------------------------------------------------------------------------

/// An override's value as the table {v = VALUE}: TOML (50, 0.1, true, "x", [1, 2]); anything that
/// does not parse is a bare string.
toml::table override_value(const std::string& raw) {
  try {
    return toml::parse("v = " + raw);
  } catch (const toml::parse_error&) {
    return toml::table{{"v", raw}};
  }
}

void apply_override(ExperimentDocument& doc, const std::string& text, const SourceLocation& origin) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError(origin, "", "an override must look like section.key=value.",
                      "Write for example `--set train.steps=50` or `--set optimizer.name=sgd`.");
  std::string path = text.substr(0, eq);
  std::string raw = text.substr(eq + 1);
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    auto dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& p : parts)
    if (p.empty() || parts.size() < 2)
      throw ConfigError(origin, path, "the key of an override must be section.key.",
                        "Write for example `--set train.steps=50`.");
  if (parts.size() > detail::kMaxKeyParts)
    throw ConfigError(origin, detail::shown(path, 40),
                      fmt::format("the key of an override has {} dotted parts; at most {} are allowed.", parts.size(),
                                  detail::kMaxKeyParts),
                      "Write the key of an option, for example `--set train.steps=50`.");
  toml::table parsed;
  try {
    detail::check_key_depth("v = " + raw, origin.file);
  } catch (const ConfigError& e) {
    throw ConfigError(origin, path, std::string("its value holds ") + e.what(), e.fix());
  }
  parsed = override_value(raw);
  toml::table* table = &doc.root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* child = table->get(parts[i]);
    if (!child) child = &table->insert_or_assign(parts[i], toml::table{}).first->second;
    if (!child->is_table())
      throw ConfigError(origin, path, "'" + detail::shown(parts[i]) + "' is not a table, so it has no keys.",
                        "Override a key inside a section, for example `--set train.steps=50`.");
    table = child->as_table();
  }
  parsed.get("v")->visit([&](auto&& node) { table->insert_or_assign(parts.back(), std::move(node)); });
  doc.overrides[path] = origin;
}

}  // namespace

// ---- Experiment -----------------------------------------------------------------------------

fs::path Experiment::directory() const {
  auto dir = file.parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

std::vector<fs::path> Experiment::plugin_paths() const {
  std::vector<fs::path> out;
  for (const auto& p : plugins.paths) out.push_back(fs::path(p).is_absolute() ? fs::path(p) : directory() / p);  // already absolute after validation
  return out;
}

SourceLocation Experiment::location(const std::string& key_path) const {
  if (!document) return {file.string(), 0, 0};
  const auto& doc = *document;
  if (auto origin = override_of(doc, key_path)) return *origin;
  // The key itself, else the nearest enclosing table that has a position, else the file start.
  std::string path = key_path;
  while (!path.empty()) {
    auto view = doc.root.at_path(path);
    if (view && view.node()->source().begin.line != 0)
      return {doc.file_label, view.node()->source().begin.line, view.node()->source().begin.column};
    auto dot = path.rfind('.');
    path = dot == std::string::npos ? std::string{} : path.substr(0, dot);
  }
  return {doc.file_label, 1, 1};
}

bool Experiment::in_file(const std::string& key_path) const {
  if (!document || document->overrides.count(key_path)) return false;
  return static_cast<bool>(document->root.at_path(key_path));
}

ConfigError Experiment::error(const std::string& key_path, const std::string& message, std::string fix) const {
  return ConfigError(location(key_path), key_path, message, std::move(fix));
}

Experiment load_experiment(const fs::path& file, const std::vector<std::string>& overrides) {
  return load_experiment(file, overrides, {});
}

Experiment load_experiment(const fs::path& file, const std::vector<std::string>& overrides,
                           const std::vector<SourceLocation>& origins) {
  Experiment e;
  e.file = file;
  auto doc = std::make_shared<ExperimentDocument>();
  doc->file_label = file.string();
  const std::string text = detail::read_experiment_text(file);
  detail::check_key_depth(text, file.string());
  try {
    doc->root = toml::parse(text, file.string());
  } catch (const toml::parse_error& err) {
    throw ConfigError({file.string(), err.source().begin.line, err.source().begin.column}, "",
                      // The parser quotes the character it saw, a newline or a control character too.
                      detail::shown(std::string(err.description()), 400) + ".", "Fix the TOML syntax at this position.");
  }
  for (std::size_t i = 0; i < overrides.size(); ++i)
    apply_override(*doc, overrides[i],
                   i < origins.size() ? origins[i] : SourceLocation{"--set " + detail::shown(overrides[i], 120), 0, 0});
  e.document = doc;
  Validator v(e);

  // Top level: only known sections, each a table.
  std::vector<std::string> sections = core_section_names();
  sections.insert(sections.end(), kPluginSections.begin(), kPluginSections.end());
  for (const auto& [key, node] : doc->root) {
    const std::string name(key.str());
    bool known = std::find(sections.begin(), sections.end(), name) != sections.end();
    if (!known)
      throw ConfigError(v.at(name, &node), name,
                        fmt::format("unknown section [{}].{} Known sections: {}.", detail::shown(name),
                                    detail::did_you_mean(name, sections), detail::join(sections)),
                        "Remove it or correct its name.");
    if (!node.is_table())
      v.fail(name, &node, fmt::format("'{}' must be a section ([{}]), got {}.", name, name, describe_node(node)),
             fmt::format("Write a [{}] header and put its keys below it.", name));
  }

  auto core = [&](const std::string& name, const auto& schema, auto& target) {
    target = schema.bind(v.section(name, table_of(doc->root, name), schema.erased(), {}, name));
  };
  core("experiment", experiment_schema(), e.experiment);
  core("optimizer", optimizer_schema(), e.optimizer);
  core("train", train_schema(), e.train);
  core("eval", eval_schema(), e.eval);
  core("log", log_schema(), e.log);
  core("distributed", distributed_schema(), e.distributed);
  core("precision", precision_schema(), e.precision);
  core("checkpoint", checkpoint_schema(), e.checkpoint);
  core("plugins", plugins_schema(), e.plugins);

  for (const auto& section : kPluginSections) {
    PluginSection& target = section == "model" ? e.model : section == "dataset" ? e.dataset : e.strategy;
    const toml::table* table = table_of(doc->root, section);
    const toml::node* name = table ? table->get("name") : nullptr;
    if (!name)
      throw e.error(section, fmt::format("[{}] needs a `name` that says which {} plugin to use.", section, section),
                    fmt::format("Add `[{}]` with `name = \"...\"`; `strata plugins` lists the names.", section));
    if (!name->is_string() || name->as_string()->get().empty())
      v.fail(section + ".name", name, fmt::format("expected a plugin name (a string), got {}.", describe_node(*name)),
             "`strata plugins` lists the names.");
    target.name = name->as_string()->get();
  }
  detail::clamp_warmup(e);
  detail::check_consistency(e);
  return e;
}

void validate_plugin_sections(Experiment& e, const Registry& registry) {
  Validator v(e);
  const std::pair<const char*, PluginKind> sections[] = {
      {"model", PluginKind::kModel}, {"dataset", PluginKind::kDataset}, {"strategy", PluginKind::kStrategy}};
  for (const auto& [section, kind] : sections) {
    PluginSection& target = kind == PluginKind::kModel ? e.model : kind == PluginKind::kDataset ? e.dataset : e.strategy;
    const RegistryEntry* entry = registry.find(kind, target.name);
    if (!entry) {
      auto known = registry.names(kind);
      throw e.error(std::string(section) + ".name",
                    fmt::format("unknown {} '{}'; available: {}.{}", section, detail::shown(target.name),
                                known.empty() ? "none" : detail::join(known), detail::did_you_mean(target.name, known)),
                    "Use one of the available names, or add the plugin's directory to STRATA_PLUGIN_PATH or "
                    "[plugins] paths.");
    }
    target.options = v.section(section, table_of(e.document->root, section), entry->schema, {"name"}, target.name);
  }
}

Options strategy_options_from(const Experiment& e, const RegistryEntry& entry, const std::vector<std::string>& sets) {
  toml::table table;
  for (const auto& set : sets) {
    const auto eq = set.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError(fmt::format("`--set strategy.{}` is not KEY=VALUE.", set),
                       "Write for example `--set strategy.secondary_group_size=2`.");
    const std::string raw = set.substr(eq + 1);
    try {
      detail::check_key_depth("v = " + raw, "--set strategy." + set.substr(0, eq));
    } catch (const ConfigError& e) {
      throw UsageError(fmt::format("`--set strategy.{}`: its value holds {}", set.substr(0, eq), e.what()), e.fix());
    }
    table.insert_or_assign(set.substr(0, eq), *override_value(raw).get("v"));
  }
  return Validator(e).section("strategy", &table, entry.schema, {"name"}, entry.name);
}

namespace {
/// Every section of the resolved experiment, in file order: (name, options, plugin name or null).
struct ResolvedSection {
  std::string name;
  Options options;
  const std::string* plugin = nullptr;
};
std::vector<ResolvedSection> resolved_sections(const Experiment& e) {
  return {{"experiment", experiment_schema().dump(e.experiment)},
          {"model", e.model.options, &e.model.name},
          {"dataset", e.dataset.options, &e.dataset.name},
          {"strategy", e.strategy.options, &e.strategy.name},
          {"optimizer", optimizer_schema().dump(e.optimizer)},
          {"train", train_schema().dump(e.train)},
          {"eval", eval_schema().dump(e.eval)},
          {"log", log_schema().dump(e.log)},
          {"distributed", distributed_schema().dump(e.distributed)},
          {"precision", precision_schema().dump(e.precision)},
          {"checkpoint", checkpoint_schema().dump(e.checkpoint)},
          {"plugins", plugins_schema().dump(e.plugins)}};
}
}  // namespace

std::string resolved_toml(const Experiment& e) {
  std::string out = "# Resolved experiment: " + e.file.string() + " with every default filled in.\n";
  for (const auto& section : resolved_sections(e)) {
    out += "\n[" + section.name + "]\n";
    if (section.plugin) out += "name = " + to_toml(*section.plugin) + "\n";
    for (const auto& [key, value] : section.options.values()) out += key + " = " + to_toml(value) + "\n";
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> resolved_values(const Experiment& e) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& section : resolved_sections(e)) {
    if (section.plugin) out.emplace_back(section.name + ".name", to_toml(*section.plugin));
    for (const auto& [key, value] : section.options.values()) out.emplace_back(section.name + "." + key, to_toml(value));
  }
  return out;
}

}  // namespace strata
