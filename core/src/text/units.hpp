#pragma once
// Quantities as messages print them.

#include <string>

#include <fmt/format.h>

namespace strata {

/// Bytes as GiB to three significant digits: "22 GiB", "0.000876 GiB".
inline std::string gib(double bytes) { return fmt::format("{:.3g} GiB", bytes / (1024.0 * 1024 * 1024)); }

}  // namespace strata
