#include "plugin_loader.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <type_traits>
#include <vector>

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

#include "io/raw_stderr.hpp"
#include "strata/errors.hpp"
#include "strata/logger.hpp"
#include "strata/plugin.hpp"
#include "text/errors_text.hpp"
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

/// A check refused the library: why (a clause without the library's path) and what to do.
[[noreturn]] void refuse(const fs::path& file, const std::string& reason, std::string fix) {
  throw PluginError(file.string(), reason, std::move(fix));
}

PluginKind parse_kind(const std::string& kind, const fs::path& file) {
  if (kind == "strategy") return PluginKind::kStrategy;
  if (kind == "model") return PluginKind::kModel;
  if (kind == "dataset") return PluginKind::kDataset;
  refuse(file, "its manifest declares unknown kind '" + kind + "'", "Use STRATA_PLUGIN(strategy|model|dataset, ...).");
}

// ---- a library that crashes while its code runs ------------------------------------------------
// Its static constructors run inside dlopen, its entry points and register function right after;
// an abort or a segfault there cannot be survived in-process, but the user must learn which file
// of the search path did it. The handler may only use async-signal-safe calls, so the text is
// composed before the library's code runs.

constexpr int kFatalSignals[] = {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE};

struct CrashText {
  char head[4400];  // "error: plugin library <path> crashed while loading ("
  std::size_t head_size = 0;
  const char* volatile where = "";  // " in its initialization code"
};
CrashText crash_text;

void on_fatal_signal(int signal) {
  const char* name = signal == SIGABRT   ? "SIGABRT"
                     : signal == SIGSEGV ? "SIGSEGV"
                     : signal == SIGBUS  ? "SIGBUS"
                     : signal == SIGILL  ? "SIGILL"
                     : signal == SIGFPE  ? "SIGFPE"
                                         : "a fatal signal";
  detail::write_stderr(crash_text.head, crash_text.head_size);
  detail::write_stderr(name);
  detail::write_stderr(crash_text.where);
  detail::write_stderr(").\n  fix: remove it from the plugin search path (STRATA_PLUGIN_PATH, [plugins] paths) or rebuild "
               "it.\n");
  ::_exit(2);
}

/// While alive, a fatal signal prints one error paragraph naming `path` and exits with code 2;
/// the previous handlers (and alternate signal stack) come back when it ends.
class CrashGuard {
 public:
  CrashGuard(const std::string& path, const char* where) {
    const std::string head = "error: plugin library " + path + " crashed while loading (";
    crash_text.head_size = std::min(head.size(), sizeof crash_text.head);
    std::memcpy(crash_text.head, head.data(), crash_text.head_size);
    crash_text.where = where;
    // Its own stack, so that a stack overflow in the library is reported too.
    static char stack_memory[64 * 1024];
    stack_t stack{};
    stack.ss_sp = stack_memory;
    stack.ss_size = sizeof stack_memory;
    has_stack_ = ::sigaltstack(&stack, &previous_stack_) == 0;
    struct sigaction action {};
    action.sa_handler = on_fatal_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_ONSTACK;
    for (std::size_t i = 0; i < std::size(kFatalSignals); ++i) ::sigaction(kFatalSignals[i], &action, &previous_[i]);
  }
  ~CrashGuard() {
    for (std::size_t i = 0; i < std::size(kFatalSignals); ++i) ::sigaction(kFatalSignals[i], &previous_[i], nullptr);
    if (has_stack_) ::sigaltstack(&previous_stack_, nullptr);
  }
  CrashGuard(const CrashGuard&) = delete;
  CrashGuard& operator=(const CrashGuard&) = delete;

 private:
  struct sigaction previous_[std::size(kFatalSignals)] {};
  stack_t previous_stack_{};
  bool has_stack_ = false;
};

// ---- a library cut short ------------------------------------------------------------------------
// The dynamic loader maps a library's segments as its program headers describe them; a file cut
// short (a copy interrupted, a full disk) leaves a segment past its end, and touching that page
// inside dlopen is SIGBUS: nothing a caller can catch. Such a file is refused before dlopen.

/// Why `file` (an ELF file of this machine's class) is shorter than its headers say; empty when it
/// is complete, or not such a file (the dynamic loader then says why it cannot load it).
std::string elf_cut_short(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  Elf64_Ehdr header{};
  std::string reason;
  if (::fstat(fd, &st) == 0 && ::pread(fd, &header, sizeof header, 0) == static_cast<ssize_t>(sizeof header) &&
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) == 0 && header.e_ident[EI_CLASS] == ELFCLASS64 &&
      header.e_ident[EI_DATA] == ELFDATA2LSB && header.e_phentsize == sizeof(Elf64_Phdr)) {
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const auto end = [](std::uint64_t offset, std::uint64_t length) {  // saturated: headers may be garbage
      return offset > UINT64_MAX - length ? UINT64_MAX : offset + length;
    };
    const std::uint64_t headers_end = end(header.e_phoff, std::uint64_t{header.e_phnum} * sizeof(Elf64_Phdr));
    std::uint64_t needed = headers_end;
    std::vector<Elf64_Phdr> segments(header.e_phnum);
    if (headers_end <= size && header.e_phnum > 0 &&
        ::pread(fd, segments.data(), segments.size() * sizeof(Elf64_Phdr), static_cast<off_t>(header.e_phoff)) ==
            static_cast<ssize_t>(segments.size() * sizeof(Elf64_Phdr)))
      for (const auto& segment : segments)
        if (segment.p_type == PT_LOAD || segment.p_type == PT_DYNAMIC)
          needed = std::max(needed, end(segment.p_offset, segment.p_filesz));
    if (header.e_shoff != 0)
      needed = std::max(needed, end(header.e_shoff, std::uint64_t{header.e_shnum} * header.e_shentsize));
    if (needed > size)
      reason = fmt::format("the file is cut short (truncated): its ELF headers describe {} bytes, it holds {}", needed,
                           size);
  }
  ::close(fd);
  return reason;
}

/// The DT_NEEDED names of an ELF64 shared library (from its SHT_DYNAMIC section and the string
/// table it links to); empty when the file cannot be read as one.
std::vector<std::string> needed_libraries(const fs::path& file) {
  std::vector<std::string> names;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return names;
  struct stat st {};
  Elf64_Ehdr header{};
  const auto read_at = [fd](void* into, std::size_t bytes, std::uint64_t offset) {
    return ::pread(fd, into, bytes, static_cast<off_t>(offset)) == static_cast<ssize_t>(bytes);
  };
  std::vector<Elf64_Shdr> sections;
  if (::fstat(fd, &st) == 0 && read_at(&header, sizeof header, 0) && std::memcmp(header.e_ident, ELFMAG, SELFMAG) == 0 &&
      header.e_ident[EI_CLASS] == ELFCLASS64 && header.e_shentsize == sizeof(Elf64_Shdr) && header.e_shnum > 0 &&
      header.e_shoff < static_cast<std::uint64_t>(st.st_size)) {
    sections.resize(header.e_shnum);
    if (!read_at(sections.data(), sections.size() * sizeof(Elf64_Shdr), header.e_shoff)) sections.clear();
  }
  for (const auto& dynamic : sections) {
    if (dynamic.sh_type != SHT_DYNAMIC || dynamic.sh_link >= sections.size()) continue;
    const auto& strings = sections[dynamic.sh_link];
    if (dynamic.sh_size > (1u << 20) || strings.sh_size > (16u << 20)) break;  // not a plugin's
    std::vector<Elf64_Dyn> entries(dynamic.sh_size / sizeof(Elf64_Dyn));
    std::string table(strings.sh_size, '\0');
    if (!read_at(entries.data(), entries.size() * sizeof(Elf64_Dyn), dynamic.sh_offset) ||
        !read_at(table.data(), table.size(), strings.sh_offset))
      break;
    for (const auto& entry : entries)
      if (entry.d_tag == DT_NEEDED && entry.d_un.d_val < table.size()) names.emplace_back(table.c_str() + entry.d_un.d_val);
    break;
  }
  ::close(fd);
  return names;
}

/// LibTorch's libraries (libtorch*, libc10*) and NVIDIA's (libcu*, libnccl*, libnv*).
bool left_to_the_plugins_load(const std::string& name) {
  for (const char* prefix : {"libtorch", "libc10", "libcu", "libnccl", "libnv"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

/// Opens each library `plugin` needs that the process has not loaded yet, as a root of its own
/// with RTLD_DEEPBIND, so that it binds its own globals before the process's (the plugin's load
/// then finds it loaded). A library that defines a global of the same name as one of LibTorch's
/// would otherwise be relocated onto LibTorch's: Debian's libsentencepiece (the text and mrpc
/// datasets) constructs its 32-byte absl flag FLAGS_minloglevel over libc10's 4-byte int of that
/// name and the mutex beside it, and the first TorchScript call then waits on that mutex forever.
/// A library the host's search path does not find is left to the plugin's own load (its RUNPATH).
void open_dependencies_apart(const fs::path& plugin) {
  for (const auto& name : needed_libraries(plugin)) {
    // LibTorch's and NVIDIA's libraries are left to the plugin's own load: a plugin linked with
    // LibTorch whole (libtorch_cuda) on a host that did not load it (device/cuda_support.hpp) must
    // not get a copy that binds its C++ runtime to itself before libstdc++.
    if (left_to_the_plugins_load(name)) continue;
    if (void* loaded = ::dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      ::dlclose(loaded);  // drops the reference NOLOAD took; the library stays
      continue;
    }
    if (::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) == nullptr) ::dlerror();  // kept open for good
  }
}

/// (kind, name) of every entry, sorted as the registry keeps them.
std::vector<std::pair<PluginKind, std::string>> keys_of(const Registry& registry) {
  std::vector<std::pair<PluginKind, std::string>> out;
  for (const auto* entry : registry.entries()) out.emplace_back(entry->kind, entry->name);
  return out;
}

}  // namespace

bool PluginLoader::load_library(const fs::path& file) {
  std::error_code fs_error;
  fs::path canonical = fs::weakly_canonical(file, fs_error);
  if (fs_error) canonical = file;
  for (const auto& loaded : libraries_)
    if (loaded.path == canonical) return true;
  for (const auto& failed : failures_)
    if (failed.path == canonical) return false;
  PluginLoadFailure failure;
  failure.path = canonical;
  try {
    load_checked(canonical, failure);
    return true;
  } catch (const PluginError& e) {
    failure.reason = e.what();
    failure.fix = e.fix();
  } catch (const std::exception& e) {
    failure.reason = detail::exception_text(e);
    failure.fix = "Remove the library from the plugin search path, or report this to its authors.";
  }
  while (!failure.reason.empty() && (failure.reason.back() == '.' || failure.reason.back() == '\n'))
    failure.reason.pop_back();
  failures_.push_back(std::move(failure));
  return false;
}

void PluginLoader::load_checked(const fs::path& canonical, PluginLoadFailure& failure) {
  const std::string where = canonical.string();
  if (!fs::exists(canonical))
    refuse(canonical, "the file does not exist",
           "Check the plugin search path (STRATA_PLUGIN_PATH, [plugins] paths) or rebuild the plugin.");

  if (const std::string cut = elf_cut_short(canonical); !cut.empty())
    refuse(canonical, cut, "Copy or rebuild the library whole, or remove it from the plugin search path.");

  // 1. Load with every symbol resolved now, so a missing dependency fails here, not mid-run.
  auto library = std::make_shared<boost::dll::shared_library>();
  boost::dll::fs::error_code load_error;
  {
    CrashGuard guard(where, " in its initialization code");
    open_dependencies_apart(canonical);
    library->load(canonical, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, load_error);
  }
  if (load_error || !library->is_loaded()) {
    // Boost's error code says only that loading failed; ask the dynamic loader why.
    std::string reason = load_error.message();
    if (void* probe = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL)) ::dlclose(probe);
    else if (const char* text = ::dlerror()) reason = text;
    if (reason.rfind(where + ": ", 0) == 0) reason.erase(0, where.size() + 2);  // the failure names the path
    refuse(canonical, "the dynamic loader cannot load it: " + reason,
           "Rebuild the plugin against this Strata and LibTorch, check that the libraries it needs are on the "
           "loader path (ldd " + where + "), or remove it from the plugin search path.");
  }
  // Its static constructors have run: unloading it could be unsafe, whatever the checks below say.
  keep_forever(library);

  // 2. ABI version, read through a plain C function before trusting anything else.
  if (!library->has(kAbiVersionSymbol))
    refuse(canonical, "not a Strata plugin: it does not export `" + std::string(kAbiVersionSymbol) + "`",
           "Define the plugin's entry points with STRATA_PLUGIN(...) from <strata/plugin.hpp>, or remove this file "
           "from the plugin search path.");
  std::uint32_t abi = 0;
  {
    CrashGuard guard(where, " in its ABI version function");
    abi = library->get<std::uint32_t()>(kAbiVersionSymbol)();
  }
  if ((abi >> 16) != (kAbiVersion >> 16) || (abi & 0xffff) > (kAbiVersion & 0xffff))
    refuse(canonical,
           "built for plugin ABI " + abi_string(abi) + ", but this strata host provides ABI " +
               abi_string(kAbiVersion) + " (same major and a minor not newer than the host's are required)",
           "Rebuild the plugin against this version of the Strata SDK.");

  // 3. Manifest: kind, names, and the LibTorch it was compiled against.
  for (const char* symbol : {kManifestSymbol, kRegisterSymbol})
    if (!library->has(symbol))
      refuse(canonical, "it does not export `" + std::string(symbol) + "`",
             "Define the plugin's entry points with STRATA_PLUGIN(...) from <strata/plugin.hpp>.");
  const StrataPluginManifest* manifest = nullptr;
  {
    CrashGuard guard(where, " in its manifest function");
    manifest = library->get<const StrataPluginManifest*()>(kManifestSymbol)();
  }
  if (manifest == nullptr || manifest->kind == nullptr || manifest->names == nullptr)
    refuse(canonical, "its manifest is empty", "Define it with STRATA_PLUGIN(...).");
  failure.kind = manifest->kind;  // from here a failure knows which names it would have provided
  failure.names = split_names(manifest->names);
  const PluginKind kind = parse_kind(manifest->kind, canonical);
  const std::string torch_version = manifest->torch_version ? manifest->torch_version : "?";
  if (torch_version != TORCH_VERSION || manifest->cxx11_abi != _GLIBCXX_USE_CXX11_ABI)
    refuse(canonical,
           fmt::format("built against LibTorch {} (C++11 ABI {}), but this host uses LibTorch {} (C++11 ABI {})",
                       torch_version, manifest->cxx11_abi, TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI),
           "Rebuild the plugin with the LibTorch this host was built with.");

  // 4. Register, then check the names against the manifest. The Registry has no removal, so a
  // library that fails after adding some names gets the registry back as it was from this copy.
  static_assert(std::is_copy_assignable_v<Registry>, "the loader restores a copy of the registry");
  Registry before = registry_;
  const auto keys_before = keys_of(registry_);
  registry_.set_current_library(where, library);
  char error[2048] = {0};
  using RegisterFn = int(Registry*, char*, std::size_t);
  int rc = 0;
  {
    CrashGuard guard(where, " in its register function");
    rc = library->get<RegisterFn>(kRegisterSymbol)(&registry_, error, sizeof error);
  }
  error[sizeof error - 1] = '\0';
  registry_.set_current_library({}, nullptr);
  if (rc != 0) {
    registry_ = std::move(before);
    refuse(canonical, "its register function failed: " + std::string(error),
           "Fix the plugin's register function, or remove the library from the plugin search path.");
  }
  std::vector<std::pair<PluginKind, std::string>> added;
  const auto keys_after = keys_of(registry_);
  std::set_difference(keys_after.begin(), keys_after.end(), keys_before.begin(), keys_before.end(),
                      std::back_inserter(added));
  std::vector<std::string> names, shown;
  for (const auto& [k, name] : added) {
    if (k == kind) names.push_back(name);
    shown.push_back(k == kind ? name : std::string(kind_name(k)) + " " + name);
  }
  if (names != failure.names || names.size() != added.size()) {
    registry_ = std::move(before);
    refuse(canonical,
           fmt::format("its manifest declares {} names [{}] but it registered [{}]", manifest->kind,
                       detail::join(failure.names), detail::join(shown)),
           "Make the names in STRATA_PLUGIN(...) match the ones the register function adds.");
  }

  libraries_.push_back({canonical, manifest->kind, manifest->names,
                        manifest->plugin_version ? manifest->plugin_version : "", torch_version, abi});
}

void PluginLoader::load_directory(const fs::path& dir) {
  for (const auto& failed : failures_)
    if (failed.path == dir) return;
  std::vector<fs::path> files;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    std::error_code type_error;
    if (it->is_regular_file(type_error) && it->path().extension() == ".so") files.push_back(it->path());
  }
  if (error) {
    failures_.push_back({dir, "cannot list the directory: " + error.message(),
                         "Check its permissions, or remove it from the plugin search path.", {}, {}});
    return;
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) load_library(f);
}

void PluginLoader::load_path(const fs::path& path) {
  if (fs::is_directory(path)) load_directory(path);
  else load_library(path);
}

std::vector<PluginPathEntry> plugin_search_path(const std::vector<fs::path>& extra) {
  std::vector<PluginPathEntry> out;
  const fs::path exe_dir = boost::dll::program_location().parent_path();
  for (const fs::path& candidate : {exe_dir / ".." / "plugins", exe_dir / ".." / "lib" / "strata" / "plugins"}) {
    if (fs::is_directory(candidate)) {
      out.push_back({fs::weakly_canonical(candidate), PluginPathOrigin::kBuild});
      break;
    }
  }
  if (const char* env = std::getenv("STRATA_PLUGIN_PATH")) {
    std::stringstream in(env);
    std::string item;
    while (std::getline(in, item, ':'))
      if (!item.empty()) out.push_back({item, PluginPathOrigin::kEnvironment});
  }
  for (const auto& path : extra) out.push_back({path, PluginPathOrigin::kExperiment});
  return out;
}

namespace {
/// A warning once per process, and none in the ranks strata's own launcher started.
void warn_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  const char* spawned = std::getenv("STRATA_SPAWNED");
  if (spawned != nullptr && std::string(spawned) == "1") return;
  std::lock_guard lock(mutex);
  if (!said.insert(message).second) return;
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  Logger(rank ? std::atoi(rank) : 0, world ? std::max(1, std::atoi(world)) : 1).warn(message);
}
}  // namespace

std::vector<PluginLoadFailure> load_search_path(Registry& registry, const std::vector<fs::path>& extra,
                                                bool warn_failures) {
  PluginLoader loader(registry);
  for (const auto& entry : plugin_search_path(extra)) {
    if (fs::exists(entry.path)) loader.load_path(entry.path);
    // The variable is often set for a whole session, like PATH: a stale entry is no error.
    else if (entry.origin == PluginPathOrigin::kEnvironment)
      warn_once(fmt::format("STRATA_PLUGIN_PATH entry \"{}\" does not exist; it is skipped", entry.path.string()));
  }
  if (warn_failures)
    for (const auto& f : loader.failures())
      warn_once(fmt::format("plugin library {} was not loaded: {}", f.path.string(), f.reason));
  return loader.failures();
}

std::string failure_list(const std::vector<PluginLoadFailure>& failures) {
  std::vector<std::string> items;
  for (const auto& f : failures) items.push_back(f.path.string() + " (" + f.reason + ")");
  return detail::join(items, "; ");
}

std::optional<PluginProblem> explain_missing(const Registry& registry, PluginKind kind, const std::string& name,
                                             const std::vector<PluginLoadFailure>& failures) {
  if (failures.empty() || registry.find(kind, name) != nullptr) return std::nullopt;
  for (const auto& f : failures)
    if (f.kind == kind_name(kind) && std::binary_search(f.names.begin(), f.names.end(), name))
      return PluginProblem{fmt::format("{} '{}' comes from plugin library {}, which did not load: {}.", kind_name(kind),
                                       name, f.path.string(), f.reason),
                           f.fix};
  const auto known = registry.names(kind);
  return PluginProblem{
      fmt::format("unknown {} '{}'; available: {}.{} {} plugin librar{} did not load and may provide it: {}.",
                  kind_name(kind), name, known.empty() ? "none" : detail::join(known),
                  detail::did_you_mean(name, known), failures.size(), failures.size() == 1 ? "y" : "ies",
                  failure_list(failures)),
      "Fix or remove the libraries that did not load (`strata plugins` lists them with the reason), or use one of "
      "the available names."};
}

}  // namespace strata
