#pragma once
// JSON lives in the SDK (models read Hugging Face config.json files with it).
#include "strata/json.hpp"
