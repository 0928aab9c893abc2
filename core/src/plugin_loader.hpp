#pragma once
// Finds, checks and loads plugin libraries (Boost.DLL) into a Registry.

#include <cstdint>
#include <filesystem>
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

/// Loads plugin libraries. Each library is checked in this order before any of its C++ code
/// runs: it loads (dlopen, all symbols resolved), it exports the ABI version symbol, the ABI
/// major matches and its minor is not newer than the host's, it exports a manifest whose kind
/// is known and whose LibTorch version and C++ ABI match the host's. Then its register function
/// runs, and the names it registered must be the ones its manifest declares. Any failure throws
/// PluginError naming the library. Libraries stay loaded until the process exits.
class PluginLoader {
 public:
  explicit PluginLoader(Registry& registry) : registry_(registry) {}
  /// Loads one library file (a path already loaded is skipped).
  void load_library(const std::filesystem::path& file);
  /// Loads every shared library (`*.so`) directly inside `dir`, in name order.
  void load_directory(const std::filesystem::path& dir);
  /// Loads a directory or a single library file.
  void load_path(const std::filesystem::path& path);
  const std::vector<PluginLibraryInfo>& libraries() const noexcept { return libraries_; }

 private:
  Registry& registry_;
  std::vector<PluginLibraryInfo> libraries_;
};

/// The plugin search path, in order: the build or install directory next to the `strata`
/// executable (build/plugins, or <prefix>/lib/strata/plugins), each directory of
/// STRATA_PLUGIN_PATH (':'-separated), then `extra` (from [plugins] paths).
std::vector<std::filesystem::path> plugin_search_path(const std::vector<std::filesystem::path>& extra = {});

/// "major.minor" of a packed ABI version.
std::string abi_string(std::uint32_t packed);

}  // namespace strata
