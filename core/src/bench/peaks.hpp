#pragma once
// The device peak tables are device/peaks.hpp, below both bench/ and train/; this name includes it.
#include "device/peaks.hpp"
