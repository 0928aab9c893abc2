#include "text/suggest.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

#include <fmt/format.h>

namespace strata::detail {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: insertions, deletions, substitutions and transpositions of two
  // adjacent characters each cost 1, so "mpl" is one edit from "mlp" (and two from "dp").
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string closest_match(const std::string& name, const std::vector<std::string>& candidates) {
  // The same word in other capitals ("FSDP" for "fsdp") is the likeliest slip of all.
  const auto lower = [](std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  for (const auto& c : candidates)
    if (c != name && lower(c) == lower(name)) return c;
  std::string best;
  std::size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(name, c);
    if (d < best_distance) { best_distance = d; best = c; }
  }
  // A typo changes a few characters; allow about a third of the word, at least 2.
  std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  return best_distance <= limit ? best : std::string{};
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  auto match = closest_match(name, candidates);
  return match.empty() ? std::string{} : " Did you mean '" + match + "'?";
}

namespace {
/// Length of the valid UTF-8 sequence at `s[i]` (1 for ASCII), or 0 when it is not valid UTF-8
/// or is a C1 control character (U+0080..U+009F: some terminals act on them).
std::size_t utf8_length(const std::string& s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  const std::size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  if (c == 0xc2 && byte(i + 1) < 0xa0) return 0;
  return n;
}

/// Appends `s` with control characters (except '\n' when `keep_newlines`) and invalid bytes escaped.
void append_escaped(std::string& out, const std::string& s, bool keep_newlines) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = utf8_length(s, i);
    if (n > 1 || (n == 1 && c >= 0x20 && c != 0x7f) || (c == '\n' && keep_newlines)) {
      out.append(s, i, std::max<std::size_t>(n, 1));
      i += std::max<std::size_t>(n, 1);
      continue;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += fmt::format("\\x{:02x}", c);
    ++i;
  }
}

/// Shortens `s` to about `max_bytes`: its start and end around "...[N more bytes]...", cut at
/// UTF-8 character boundaries.
std::string shortened(const std::string& s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  const auto boundary = [&](std::size_t i) {
    while (i > 0 && i < s.size() && (static_cast<unsigned char>(s[i]) & 0xc0) == 0x80) --i;
    return i;
  };
  const std::size_t head = boundary(max_bytes * 3 / 4);
  const std::size_t tail = boundary(s.size() - max_bytes / 4);
  return s.substr(0, head) + fmt::format("...[{} more bytes]...", tail - head) + s.substr(tail);
}
}  // namespace

std::string shown(const std::string& value, std::size_t max_bytes) {
  // Shorten first (an escaped 50 MB value need not be built), then escape what is left.
  std::string out;
  append_escaped(out, shortened(value, max_bytes), /*keep_newlines=*/false);
  return out;
}

std::string terminal_safe(const std::string& text, std::size_t max_line) {
  std::string escaped;
  append_escaped(escaped, text, /*keep_newlines=*/true);
  std::string out;
  for (std::size_t start = 0; start <= escaped.size();) {
    auto end = escaped.find('\n', start);
    if (end == std::string::npos) end = escaped.size();
    out += shortened(escaped.substr(start, end - start), max_line);
    if (end == escaped.size()) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

}  // namespace strata::detail
