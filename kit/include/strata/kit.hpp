#pragma once
/// \file kit.hpp
/// The strategy kit: what strategy plugins are built from. One engine (strata::Engine) runs a
/// strategy written as data (strata::Plan over a strata::Mesh), with lifecycle hooks a plugin
/// overrides and an open gradient Reducer; beneath it the flat parameter groups and the bucketed
/// gradient reduction.
/// It is not part of the plugin ABI: it is a static library (libstrata_kit.a) that every strategy
/// plugin links into itself, with hidden visibility, so each plugin carries its own private copy.
///
/// Versioning. Two versions govern a strategy plugin:
///  - the contract's ABI (STRATA_ABI_VERSION_MAJOR/MINOR, strata/plugin.hpp): the types the host
///    and a plugin share (Strategy, Comm, Model, Dataset, Registry, Options, ShardedState, ...).
///    Its major is bumped when one of their layouts or vtables changes, and the host refuses a
///    plugin of another major;
///  - the kit's version (below): bumped when the engines change. Since each plugin carries the kit
///    it was built with, a kit change never breaks a plugin built against an older kit; it only
///    reaches a plugin when that plugin is rebuilt. The major is bumped for changes that break
///    source compatibility of plugins written against the kit, the minor for additions.
/// Every kit declaration lives in the inline namespace strata::kit_v<major>, so kits of different
/// majors (two plugins, or a test program and the plugins it loads) never share a symbol name in
/// one process; code still names them strata::Engine, strata::Plan, strata::FlatGroup, ...

#define STRATA_KIT_VERSION_MAJOR 3
#define STRATA_KIT_VERSION_MINOR 3

// Renaming the inline namespace goes with a new major: `namespace strata::inline kit_vN` in every
// kit header and source.
static_assert(STRATA_KIT_VERSION_MAJOR == 3, "the kit's inline namespace is strata::kit_v3");

namespace strata::inline kit_v3 {
/// (major << 16) | minor of the kit this code was compiled against.
inline constexpr unsigned kKitVersion = (STRATA_KIT_VERSION_MAJOR << 16) | STRATA_KIT_VERSION_MINOR;
}  // namespace strata::inline kit_v3
