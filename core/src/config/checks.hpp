#pragma once
// The experiment file's text and the checks across its keys (config/experiment.cpp parses the file
// and validates each key against its schema). Errors are ConfigErrors at the key.

#include <cstddef>
#include <filesystem>
#include <string>

#include "config/experiment.hpp"

namespace strata::detail {

/// The longest duration strata waits for anything (timeout_s, heartbeat_s): 11.6 days.
inline constexpr double kMaxSeconds = 1e6;

/// The experiment file's text: a regular file of at most 8 MiB, read with errors named.
std::string read_experiment_text(const std::filesystem::path& file);
/// The most dotted parts of a key or table header (docs/user-guide.md, "Experiment files").
inline constexpr std::size_t kMaxKeyParts = 64;
/// Refuses keys and table headers of more than kMaxKeyParts dotted parts, inline tables' too,
/// before toml++ parses them (it recurses once per part: a key of 100000 parts overflowed the
/// stack): a ConfigError at `label`, the line and column, and the key's start.
void check_key_depth(const std::string& text, const std::string& label);
/// More warmup steps than steps are clamped to the steps, with a warning.
void clamp_warmup(const Experiment& e);
/// The checks across keys and against this machine (device, threads, ranks, run paths, ...).
void check_consistency(const Experiment& e);

}  // namespace strata::detail
