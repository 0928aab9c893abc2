#include "plugin_loader.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include <dlfcn.h>

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

#include "strata/errors.hpp"
#include "strata/plugin.hpp"
#include "text/suggest.hpp"

namespace strata {

namespace fs = std::filesystem;

std::string abi_string(std::uint32_t packed) {
  return std::to_string(packed >> 16) + "." + std::to_string(packed & 0xffff);
}

namespace {

/// Plugins are never unloaded while the process runs: unloading a library that registered
/// LibTorch operators or autograd functions is unsafe. Handles are parked here for good.
void keep_forever(std::shared_ptr<boost::dll::shared_library> library) {
  static std::mutex mutex;
  static auto* parked = new std::vector<std::shared_ptr<boost::dll::shared_library>>();
  std::lock_guard lock(mutex);
  parked->push_back(std::move(library));
}

std::string file_label(const fs::path& p) { return p.filename().string(); }

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream in(names);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  std::sort(out.begin(), out.end());
  return out;
}

PluginKind parse_kind(const std::string& kind, const fs::path& file) {
  if (kind == "strategy") return PluginKind::kStrategy;
  if (kind == "model") return PluginKind::kModel;
  if (kind == "dataset") return PluginKind::kDataset;
  throw PluginError(file.string(), "plugin library " + file_label(file) + " declares unknown kind '" + kind + "'.",
                    "Use STRATA_PLUGIN(strategy|model|dataset, ...).");
}

}  // namespace

void PluginLoader::load_library(const fs::path& file) {
  std::error_code fs_error;
  fs::path canonical = fs::weakly_canonical(file, fs_error);
  if (fs_error) canonical = file;
  for (const auto& loaded : libraries_)
    if (loaded.path == canonical) return;
  const std::string where = canonical.string();
  const std::string label = file_label(canonical);
  if (!fs::exists(canonical))
    throw PluginError(where, "plugin library " + where + " does not exist.",
                      "Check the plugin search path (STRATA_PLUGIN_PATH, [plugins] paths) or rebuild the plugin.");

  // 1. Load with every symbol resolved now, so a missing dependency fails here, not mid-run.
  auto library = std::make_shared<boost::dll::shared_library>();
  boost::dll::fs::error_code load_error;
  library->load(canonical, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, load_error);
  if (load_error || !library->is_loaded()) {
    // Boost's error code says only that loading failed; ask the dynamic loader why.
    std::string reason = load_error.message();
    if (void* probe = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL)) ::dlclose(probe);
    else if (const char* text = ::dlerror()) reason = text;
    throw PluginError(where, "cannot load plugin library " + label + ": " + reason + ".",
                      "Rebuild the plugin against this Strata and LibTorch, and check that the libraries it "
                      "needs are on the loader path (ldd " + where + ").");
  }

  // 2. ABI version, read through a plain C function before trusting anything else.
  if (!library->has(kAbiVersionSymbol))
    throw PluginError(where,
                      label + " is not a Strata plugin: it does not export `" + std::string(kAbiVersionSymbol) + "`.",
                      "Define the plugin's entry points with STRATA_PLUGIN(...) from <strata/plugin.hpp>, or "
                      "remove this file from the plugin directory.");
  const std::uint32_t abi = library->get<std::uint32_t()>(kAbiVersionSymbol)();
  if ((abi >> 16) != (kAbiVersion >> 16) || (abi & 0xffff) > (kAbiVersion & 0xffff))
    throw PluginError(where,
                      label + " was built for plugin ABI " + abi_string(abi) + ", but this strata host provides ABI " +
                          abi_string(kAbiVersion) + " (same major and a minor not newer than the host's are required).",
                      "Rebuild the plugin against this version of the Strata SDK.");

  // 3. Manifest: kind, names, and the LibTorch it was compiled against.
  for (const char* symbol : {kManifestSymbol, kRegisterSymbol})
    if (!library->has(symbol))
      throw PluginError(where, label + " does not export `" + std::string(symbol) + "`.",
                        "Define the plugin's entry points with STRATA_PLUGIN(...) from <strata/plugin.hpp>.");
  const StrataPluginManifest* manifest = library->get<const StrataPluginManifest*()>(kManifestSymbol)();
  if (manifest == nullptr || manifest->kind == nullptr || manifest->names == nullptr)
    throw PluginError(where, label + " returned an empty manifest.", "Define it with STRATA_PLUGIN(...).");
  const PluginKind kind = parse_kind(manifest->kind, canonical);
  const std::string torch_version = manifest->torch_version ? manifest->torch_version : "?";
  if (torch_version != TORCH_VERSION || manifest->cxx11_abi != _GLIBCXX_USE_CXX11_ABI)
    throw PluginError(where,
                      fmt::format("{} was built against LibTorch {} (C++11 ABI {}), but this host uses LibTorch {} "
                                  "(C++11 ABI {}).",
                                  label, torch_version, manifest->cxx11_abi, TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI),
                      "Rebuild the plugin with the LibTorch this host was built with.");

  // 4. Register, then check the names against the manifest.
  const auto before = registry_.names(kind);
  std::shared_ptr<void> handle = library;
  registry_.set_current_library(where, handle);
  char error[2048] = {0};
  using RegisterFn = int(Registry*, char*, std::size_t);
  const int rc = library->get<RegisterFn>(kRegisterSymbol)(&registry_, error, sizeof error);
  registry_.set_current_library({}, nullptr);
  if (rc != 0)
    throw PluginError(where, label + " failed to register its plugins: " + std::string(error),
                      "Fix the plugin's register function, or remove the library from the plugin search path.");
  auto after = registry_.names(kind);
  std::vector<std::string> added;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(added));
  const auto declared = split_names(manifest->names);
  if (added != declared)
    throw PluginError(where,
                      fmt::format("{} declares {} names [{}] in its manifest but registered [{}].", label,
                                  manifest->kind, detail::join(declared), detail::join(added)),
                      "Make the names in STRATA_PLUGIN(...) match the ones the register function adds.");

  keep_forever(library);
  libraries_.push_back({canonical, manifest->kind, manifest->names,
                        manifest->plugin_version ? manifest->plugin_version : "", torch_version, abi});
}

void PluginLoader::load_directory(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".so") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) load_library(f);
}

void PluginLoader::load_path(const fs::path& path) {
  if (fs::is_directory(path)) load_directory(path);
  else load_library(path);
}

std::vector<fs::path> plugin_search_path(const std::vector<fs::path>& extra) {
  std::vector<fs::path> out;
  const fs::path exe_dir = boost::dll::program_location().parent_path();
  for (const fs::path& candidate : {exe_dir / ".." / "plugins", exe_dir / ".." / "lib" / "strata" / "plugins"}) {
    if (fs::is_directory(candidate)) {
      out.push_back(fs::weakly_canonical(candidate));
      break;
    }
  }
  if (const char* env = std::getenv("STRATA_PLUGIN_PATH")) {
    std::stringstream in(env);
    std::string item;
    while (std::getline(in, item, ':'))
      if (!item.empty()) out.emplace_back(item);
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

}  // namespace strata
