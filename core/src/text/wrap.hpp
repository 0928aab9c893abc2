#pragma once
// Output that fits the terminal it is printed on: lines wrapped at its width when stdout is one,
// left whole for a pipe or a file (where a reader or a program wants one record a line).

#include <cstddef>
#include <string>

namespace strata {

/// The width to wrap stdout's lines at: the terminal's columns when stdout is a terminal ($COLUMNS
/// when the terminal does not say), 0 (do not wrap) when stdout is a pipe or a file.
std::size_t terminal_columns();

/// `text` broken at spaces into lines of at most `width` columns (a word longer than a line keeps
/// its own line whole); every line after the first starts with `indent` spaces, and the first is
/// printed after `used` columns of its own line. No newline at the end. `width` 0 returns `text`
/// as it is.
std::string wrap_text(const std::string& text, std::size_t width, std::size_t indent, std::size_t used = 0);

}  // namespace strata
