#pragma once
// Writing to stderr without allocating or taking a lock: usable in a signal handler, between fork
// and exec, and in a process about to _exit.

#include <unistd.h>

#include <cerrno>
#include <cstddef>

// Hidden: a plugin cannot interpose them, and a signal handler calls them without the PLT.
namespace strata::detail {

/// Writes all `size` bytes (retrying partial writes and EINTR); gives up silently on an error.
[[gnu::visibility("hidden")]] inline void write_stderr(const char* text, std::size_t size) noexcept {
  while (size > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, size);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    text += n;
    size -= static_cast<std::size_t>(n);
  }
}

[[gnu::visibility("hidden")]] inline void write_stderr(const char* text) noexcept {
  std::size_t size = 0;
  while (text[size] != '\0') ++size;
  write_stderr(text, size);
}

/// A non-negative number in decimal (strerror and fmt may allocate).
[[gnu::visibility("hidden")]] inline void write_stderr_number(int value) noexcept {
  char digits[16];
  int i = sizeof digits - 1;
  digits[i] = '\0';
  do {
    digits[--i] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 && i > 0);
  write_stderr(digits + i);
}

}  // namespace strata::detail
