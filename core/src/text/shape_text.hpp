#pragma once
// A tensor shape as messages print it.

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

/// "[2, 3]"; "[]" for a scalar. Hidden: libstrata_core's own, not part of what it exports.
[[gnu::visibility("hidden")]] inline std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

}  // namespace strata
