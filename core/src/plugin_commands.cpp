// `strata plugins` and `strata describe`: what the plugin search path provides, and what of it
// did not load.
#include <algorithm>
#include <iostream>

#include <fmt/format.h>

#include "sweep/sweep.hpp"
#include "config/experiment.hpp"
#include "plugin_loader.hpp"
#include "run.hpp"
#include "strata/errors.hpp"
#include "text/suggest.hpp"
#include "text/wrap.hpp"

namespace strata {

void list_plugins() {
  Registry registry;
  const auto failures = load_search_path(registry, {}, /*warn_failures=*/false);
  std::size_t name_width = 4, description_width = 11;
  for (const auto* entry : registry.entries()) {
    name_width = std::max(name_width, entry->name.size());
    description_width = std::max(description_width, entry->description.size());
  }
  // One line a plugin for a pipe or a file; on a terminal narrower than that line, the description
  // wraps under itself and the library goes on a line of its own.
  const std::size_t columns = terminal_columns();
  const std::size_t indent = 9 + 1 + name_width + 2;
  const bool wraps = columns > 0 && indent + description_width + 2 + 40 > columns;
  const auto row = [&](const std::string& kind, const std::string& name, const std::string& description,
                       const std::string& library) {
    if (!wraps) {
      std::cout << fmt::format("{:<9} {:<{}}  {:<{}}  {}\n", kind, name, name_width, description, description_width,
                               library);
      return;
    }
    std::cout << fmt::format("{:<9} {:<{}}  {}\n", kind, name, name_width, wrap_text(description, columns, indent, indent));
    // A path does not break: it starts further left when it would not fit under the description.
    if (!library.empty())
      std::cout << std::string(library.size() + indent <= columns ? indent : library.size() + 4 <= columns ? 4 : 0, ' ')
                << library << "\n";
  };
  row("KIND", "NAME", wraps ? "DESCRIPTION (then its library)" : "DESCRIPTION", wraps ? "" : "LIBRARY");
  for (const auto* entry : registry.entries())
    row(kind_name(entry->kind), entry->name, entry->description, entry->library);
  // After the table, apart: what did not load and why, one library a line.
  if (!failures.empty()) {
    std::cout << fmt::format("\nnot loaded ({} librar{}; commands that do not need {} still run):\n", failures.size(),
                             failures.size() == 1 ? "y" : "ies", failures.size() == 1 ? "it" : "them");
    for (const auto& f : failures)
      std::cout << "  " << wrap_text(fmt::format("{}: {}", f.path.string(), f.reason), columns, 4) << "\n";
  }
  // Exit 0 while anything is usable; no plugin at all is a broken installation.
  if (registry.entries().empty())
    throw PluginError({}, failures.empty() ? std::string("no plugin library was found on the plugin search path.")
                                           : fmt::format("no plugin loaded: every library on the plugin search path "
                                                         "failed ({} listed above).", failures.size()),
                      "Build the plugins (cmake --build build), or point STRATA_PLUGIN_PATH at a directory of plugin "
                      "libraries.");
}

namespace {
void print_schema(const std::string& title, const OptionsSchema& schema) {
  std::cout << title << "\n";
  if (schema.specs.empty()) std::cout << "  (no options)\n";
  const std::size_t columns = terminal_columns();
  for (const auto& s : schema.specs) {
    std::cout << fmt::format("  {:<20} {:<18} default {}\n", s.name, type_name(s.type), to_toml(s.default_value));
    const std::string doc = s.doc + (s.constraint_text().empty() ? "" : " (" + s.constraint_text() + ")");
    std::cout << fmt::format("  {:<20} {}\n", "", wrap_text(doc, columns, 23, 23));
  }
}
void print_key(const SweepKeyDoc& key) {
  std::cout << fmt::format("  {:<20} {:<18} {}\n", key.name, key.type,
                           key.default_text.empty() ? std::string() : "default " + key.default_text);
  std::cout << fmt::format("  {:<20} {}\n", "", key.doc);
}

/// The keys of a sweep file, from the schema parse_sweep() validates against.
void describe_compare() {
  const SweepSchema& schema = sweep_schema();
  print_schema("[compare] (a sweep file of `strata compare`; `strata validate` checks it whole)", schema.options);
  for (const auto& table : schema.tables) print_key(table);
  print_schema("\n[compare.axes] (in file order, the first axis outermost)", schema.axes);
  print_key(schema.any_axis);
  std::cout << "\n[compare.set]\n";
  print_key(schema.any_set);
  std::cout << "\n" << schema.overrides << "\n";
}
}  // namespace

void describe(const std::string& name) {
  if (name.empty()) {  // what there is to describe
    Registry registry;
    const auto failures = load_search_path(registry, {});
    std::cout << "strata describe NAME: the keys and options of\n";
    std::cout << "  core sections: " << detail::join(core_section_names()) << "\n";
    std::cout << "  a sweep file: compare\n";
    const std::pair<PluginKind, const char*> kinds[] = {
        {PluginKind::kModel, "models"}, {PluginKind::kDataset, "datasets"}, {PluginKind::kStrategy, "strategies"}};
    for (const auto& [kind, label] : kinds) {
      std::vector<std::string> names;
      for (const auto* entry : registry.entries())
        if (entry->kind == kind) names.push_back(entry->name);
      std::cout << "  " << label << ": " << (names.empty() ? "(none found)" : detail::join(names)) << "\n";
    }
    if (!failures.empty())
      std::cout << fmt::format("  ({} plugin librar{} did not load: `strata plugins` says why)\n", failures.size(),
                               failures.size() == 1 ? "y" : "ies");
    return;
  }
  if (const auto* schema = core_section_schema(name)) {
    print_schema(fmt::format("[{}] (core section)", name), *schema);
    return;
  }
  if (name == "compare") return describe_compare();
  Registry registry;
  const auto failures = load_search_path(registry, {});
  std::vector<std::string> all = core_section_names();
  all.push_back("compare");
  bool found = false;
  for (const auto* entry : registry.entries()) {
    all.push_back(entry->name);
    if (entry->name != name) continue;
    found = true;
    const std::string title = fmt::format("{} '{}': {}", kind_name(entry->kind), entry->name, entry->description);
    print_schema(fmt::format("{}\n  library: {}\n\n[{}] name = \"{}\", options:", wrap_text(title, terminal_columns(), 2),
                             entry->library, kind_name(entry->kind), entry->name),
                 entry->schema);
  }
  if (found) return;
  for (const auto& f : failures)
    if (std::binary_search(f.names.begin(), f.names.end(), name))
      throw PluginError(f.path.string(),
                        fmt::format("{} '{}' comes from this library, which did not load: {}.", f.kind, name, f.reason),
                        f.fix);
  if (!failures.empty())
    throw PluginError({}, fmt::format("nothing named '{}' to describe.{} Known: {}. {} plugin librar{} did not load "
                                      "and may provide it: {}.", name, detail::did_you_mean(name, all),
                                      detail::join(all), failures.size(), failures.size() == 1 ? "y" : "ies",
                                      failure_list(failures)),
                      "Fix or remove the libraries that did not load (`strata plugins` lists them with the reason).");
  throw PluginError({}, fmt::format("nothing named '{}' to describe.{} Known: {}.", name, detail::did_you_mean(name, all),
                                    detail::join(all)),
                    "Run `strata plugins` for plugin names; core sections are " + detail::join(core_section_names()) +
                        "; `strata describe compare` lists the keys of a sweep file.");
}

}  // namespace strata
