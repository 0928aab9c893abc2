#pragma once
/// \file text_files.hpp
/// Finding and reading the local text files of the token datasets (`text`, `mrpc`). Every failure
/// throws strata::OptionError("path") naming the file and what is wrong, so the host reports it at
/// `[dataset] path` with exit code 2.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "strata/dataset.hpp"

namespace strata::tokenizer {

/// `path` in single quotes, for messages, through printable(): a newline or escape sequence in a
/// user's path cannot split the message or drive the terminal.
std::string quoted(const std::filesystem::path& path);

/// Byte offset of the first byte of `text` that is not part of valid UTF-8 (overlong forms,
/// surrogates and code points above U+10FFFF count as invalid) or is a NUL, or npos when none.
std::size_t find_invalid_utf8(std::string_view text) noexcept;

/// `text` (from a file) safe to print in a message: control characters (C0, DEL and C1, tab
/// included) become `\xNN` or `\u00NN`, bytes that are not UTF-8 become `\xNN`.
std::string printable(std::string_view text);

/// 1-based line number of byte `offset` in `text`.
std::int64_t line_of(std::string_view text, std::size_t offset) noexcept;

/// Reads `file` as UTF-8 text, without a leading byte order mark. Reads at most `max_bytes`
/// (0 = all; a cut inside a multi-byte character drops that character). Throws OptionError("path")
/// when the file cannot be read or is not UTF-8 text, naming the file, the offset and line, and
/// ending with `fix`.
std::string read_text_file(const std::filesystem::path& file, std::uint64_t max_bytes, const std::string& fix);

/// The files a text location stands for: the file itself, or the regular files directly inside a
/// directory (not recursive), sorted by name, without hidden files (".name") and without a second
/// copy of a file reached through a symbolic link. Throws OptionError("path") when the location
/// does not exist or holds no file.
std::vector<std::filesystem::path> list_text_files(const DataLocation& where, const std::string& fix);

}  // namespace strata::tokenizer
