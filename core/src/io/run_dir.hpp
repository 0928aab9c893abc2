#pragma once
// Run directories and small file helpers.

#include <filesystem>
#include <string>

namespace strata {

/// `out` when given (refused when it holds a run already, unless `continuing`: a resumed run); else
/// <out_dir>/<name>/<UTC time, e.g. 20261121T193012Z> (a numeric suffix is added if that exists).
/// The directory is created.
std::filesystem::path make_run_directory(const std::filesystem::path& out, const std::string& out_dir,
                                         const std::string& name, bool continuing = false);
/// The current UTC time in strftime `format`, e.g. "%Y%m%dT%H%M%SZ" -> 20261121T193012Z.
std::string utc_time(const char* format);
/// Writes `text` to `file` atomically (temporary file, then rename). Throws strata::Error.
void write_text_file(const std::filesystem::path& file, const std::string& text);

}  // namespace strata
