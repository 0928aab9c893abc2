#pragma once
/// \file plugin.hpp
/// The plugin ABI. A plugin library exports three `extern "C"` symbols, all defined by one
/// macro:
///
///   strata_plugin_abi_version() -> packed (major << 16 | minor)   checked first
///   strata_plugin_manifest()    -> const StrataPluginManifest*      checked second
///   strata_plugin_register(Registry*, char* error, size_t size) -> 0 on success
///
/// The host accepts a library when its ABI major equals the host's and its minor is not newer,
/// and when it was built against the same LibTorch version and C++ ABI. Only then does it call
/// any C++ code in it. Exceptions never cross the `extern "C"` boundary: the register function
/// catches them and returns the message.
///
/// Usage, in exactly one source file of the plugin:
/// \code
///   static void register_mlp(strata::Registry& registry) { registry.add_model(...); }
///   STRATA_PLUGIN(model, "mlp", "0.1.0", register_mlp)
/// \endcode

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>

#include <torch/version.h>

#include "strata/registry.hpp"

/// ABI of this SDK. Bump the major for incompatible changes of any SDK type a plugin sees; bump
/// the minor when adding something a newer plugin may rely on.
#define STRATA_ABI_VERSION_MAJOR 11
#define STRATA_ABI_VERSION_MINOR 2  // 11.1: Comm::all_to_all; 11.2: ScheduleInput::tied

extern "C" {
/// Plain-C description of a plugin library, readable before any C++ call into it.
struct StrataPluginManifest {
  std::uint32_t abi_version;   ///< (major << 16) | minor of the SDK the plugin was built with
  const char* kind;            ///< "strategy", "model" or "dataset"
  const char* names;           ///< comma-separated names it registers, e.g. "zero1,zero2,zero3"
  const char* plugin_version;  ///< the plugin's own version
  const char* torch_version;   ///< TORCH_VERSION it was compiled against, e.g. "2.11.0"
  int cxx11_abi;               ///< value of _GLIBCXX_USE_CXX11_ABI it was compiled with
};
}

namespace strata {
constexpr std::uint32_t kAbiVersion = (STRATA_ABI_VERSION_MAJOR << 16) | STRATA_ABI_VERSION_MINOR;
constexpr const char* kAbiVersionSymbol = "strata_plugin_abi_version";
constexpr const char* kManifestSymbol = "strata_plugin_manifest";
constexpr const char* kRegisterSymbol = "strata_plugin_register";

namespace detail {
/// Runs `fn(registry)`, turning any exception into a message for the C boundary.
template <class Fn>
int register_noexcept(Fn fn, Registry* registry, char* error, std::size_t size) noexcept {
  try {
    fn(*registry);
    return 0;
  } catch (const std::exception& e) {
    if (error && size) { std::strncpy(error, e.what(), size - 1); error[size - 1] = '\0'; }
  } catch (...) {
    if (error && size) { std::strncpy(error, "unknown exception", size - 1); error[size - 1] = '\0'; }
  }
  return 1;
}
}  // namespace detail
}  // namespace strata

#define STRATA_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

/// Defines the three exported symbols of a plugin library. `kind` is one of strategy, model,
/// dataset (unquoted); `names` the comma-separated names `register_fn` adds.
#define STRATA_PLUGIN(kind, names, version, register_fn)                                             \
  STRATA_PLUGIN_EXPORT std::uint32_t strata_plugin_abi_version() { return ::strata::kAbiVersion; }   \
  STRATA_PLUGIN_EXPORT const StrataPluginManifest* strata_plugin_manifest() {                        \
    static const StrataPluginManifest manifest{::strata::kAbiVersion, #kind, names, version,         \
                                               TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI};               \
    return &manifest;                                                                                 \
  }                                                                                                   \
  STRATA_PLUGIN_EXPORT int strata_plugin_register(::strata::Registry* registry, char* error,         \
                                                  std::size_t size) {                                 \
    return ::strata::detail::register_noexcept(register_fn, registry, error, size);                   \
  }
