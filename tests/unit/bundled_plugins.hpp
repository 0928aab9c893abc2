#pragma once
// The plugins of this build (STRATA_PLUGIN_BUILD_DIR), loaded once per test binary.

#include "plugin_loader.hpp"
#include "strata/registry.hpp"

namespace strata::test {

inline const Registry& bundled_plugins() {
  static const Registry registry = [] {
    Registry r;
    PluginLoader(r).load_directory(STRATA_PLUGIN_BUILD_DIR);
    return r;
  }();
  return registry;
}

}  // namespace strata::test
