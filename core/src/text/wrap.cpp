#include "text/wrap.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

namespace strata {

std::size_t terminal_columns() {
  if (isatty(STDOUT_FILENO) != 1) return 0;
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && n > 0 && n < 100000) return static_cast<std::size_t>(n);
  }
  return 0;
}

std::string wrap_text(const std::string& text, std::size_t width, std::size_t indent, std::size_t used) {
  if (width == 0 || used + text.size() <= width) return text;
  // Below some room for words, wrapping helps nobody: keep the lines whole.
  if (width <= indent + 10) return text;
  std::istringstream words(text);
  std::string out, line, word;
  std::size_t start = used;  // where `line` begins in the current output line
  while (words >> word) {
    if (line.empty()) {
      line = word;
    } else if (start + line.size() + 1 + word.size() <= width) {
      line += ' ' + word;
    } else {
      out += line + '\n' + std::string(indent, ' ');
      start = indent;
      line = word;
    }
  }
  return out + line;
}

}  // namespace strata
