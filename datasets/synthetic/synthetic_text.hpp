#pragma once
// The `synthetic_text` dataset, registered by the `synthetic` plugin library.

#include "strata/registry.hpp"

void register_synthetic_text(strata::Registry& registry);
