#pragma once
// Finds, checks and loads plugin libraries (Boost.DLL) into a Registry.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "strata/registry.hpp"

namespace strata {

/// What the host read from a loaded library's manifest.
struct PluginLibraryInfo {
  std::filesystem::path path;
  std::string kind;
  std::string names;
  std::string plugin_version;
  std::string torch_version;
  std::uint32_t abi_version = 0;
};

/// A library of the plugin search path that did not load, and why.
struct PluginLoadFailure {
  std::filesystem::path path;
  std::string reason;  ///< one line, without the library's path ("not a Strata plugin: ...")
  std::string fix;     ///< what to do about it
  std::string kind;    ///< "strategy", "model" or "dataset" from its manifest; empty when not read
  std::vector<std::string> names;  ///< the names its manifest declares (sorted); empty when not read
};

/// Loads plugin libraries. Each library is checked in this order before any of its C++ code
/// runs: it loads (dlopen, all symbols resolved), it exports the ABI version symbol, the ABI
/// major matches and its minor is not newer than the host's, it exports a manifest whose kind
/// is known and whose LibTorch version and C++ ABI match the host's. Then its register function
/// runs, and the names it registered must be the ones its manifest declares.
///
/// A library that fails any step is recorded in failures() and leaves the registry as it was
/// (the registry is restored from a copy, so a library that registered some names before failing
/// leaves none of them; pointers into the registry taken before that load are invalidated). The
/// other libraries still load. A fatal signal while a library's own code runs (its static
/// constructors under dlopen, its entry points, its register function) cannot be survived: the
/// process prints one error paragraph naming the library and exits with code 2. Libraries whose
/// code ran stay loaded until the process exits.
class PluginLoader {
 public:
  explicit PluginLoader(Registry& registry) : registry_(registry) {}
  /// Loads one library file (a path already tried is skipped); false when it failed (recorded).
  bool load_library(const std::filesystem::path& file);
  /// Loads every shared library (`*.so`) directly inside `dir`, in name order.
  void load_directory(const std::filesystem::path& dir);
  /// Loads a directory or a single library file.
  void load_path(const std::filesystem::path& path);
  const std::vector<PluginLibraryInfo>& libraries() const noexcept { return libraries_; }
  /// The libraries that did not load, in the order they were tried.
  const std::vector<PluginLoadFailure>& failures() const noexcept { return failures_; }

 private:
  void load_checked(const std::filesystem::path& canonical, PluginLoadFailure& failure);
  Registry& registry_;
  std::vector<PluginLibraryInfo> libraries_;
  std::vector<PluginLoadFailure> failures_;
};

/// Where an entry of the plugin search path comes from.
enum class PluginPathOrigin {
  kBuild,        ///< the directory next to the executable
  kEnvironment,  ///< STRATA_PLUGIN_PATH
  kExperiment,   ///< [plugins] paths
};

/// One directory (or library file) of the plugin search path.
struct PluginPathEntry {
  std::filesystem::path path;
  PluginPathOrigin origin = PluginPathOrigin::kBuild;
};

/// The plugin search path, in order: the build or install directory next to the `strata`
/// executable (build/plugins, or <prefix>/lib/strata/plugins), each directory of
/// STRATA_PLUGIN_PATH (':'-separated), then `extra` (from [plugins] paths). Entries are returned
/// whether they exist or not: the caller decides (a missing STRATA_PLUGIN_PATH entry is a warning,
/// a missing [plugins] paths entry an error).
std::vector<PluginPathEntry> plugin_search_path(const std::vector<std::filesystem::path>& extra = {});

/// Loads every library of plugin_search_path(extra) into `registry` (the caller has checked that
/// the `extra` entries exist) and returns the libraries that did not load. A library that does not
/// load stops only the commands that need it: each gets one warning line on stderr naming it and
/// the reason (unless `warn_failures` is false: `strata plugins` lists them itself). A
/// STRATA_PLUGIN_PATH entry that does not exist is skipped with a warning. Warnings are printed
/// once per process, and not by the ranks strata's own launcher started (STRATA_SPAWNED=1): it
/// printed them before starting them.
std::vector<PluginLoadFailure> load_search_path(Registry& registry, const std::vector<std::filesystem::path>& extra,
                                                bool warn_failures = true);

/// An error message and its fix.
struct PluginProblem {
  std::string message;
  std::string fix;
};

/// Why `name` of `kind` is not in `registry` when some libraries did not load: the library whose
/// manifest declares that name, else every library that did not load, listed with its reason as
/// the possible source. nullopt when the name is registered or no library failed.
std::optional<PluginProblem> explain_missing(const Registry& registry, PluginKind kind, const std::string& name,
                                             const std::vector<PluginLoadFailure>& failures);

/// "path (reason); path (reason)" of the libraries that did not load.
std::string failure_list(const std::vector<PluginLoadFailure>& failures);

/// "major.minor" of a packed ABI version.
std::string abi_string(std::uint32_t packed);

}  // namespace strata
