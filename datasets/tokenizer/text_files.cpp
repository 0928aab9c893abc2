#include "text_files.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <system_error>

#include "strata/errors.hpp"

namespace strata::tokenizer {

namespace fs = std::filesystem;

namespace {

std::string hex_byte(unsigned char byte) {
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "0x%02X", byte);
  return buffer;
}

/// Length of the valid UTF-8 sequence starting at text[i], or 0 when it is invalid or cut short.
std::size_t utf8_sequence(std::string_view text, std::size_t i) noexcept {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = at(i);
  if (b0 < 0x80) return b0 == 0 ? 0 : 1;
  std::size_t length = 0;
  unsigned char lo = 0x80;  // range of the second byte (excludes overlongs and surrogates)
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < length; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return length;
}

}  // namespace

std::string quoted(const fs::path& path) {
  // Appended piece by piece: GCC 12 misreports `"'" + string&&` (-Wstringop-overflow, PR 105329).
  std::string out = "'";
  out += printable(path.string());
  out += '\'';
  return out;
}

std::size_t find_invalid_utf8(std::string_view text) noexcept {
  std::size_t i = 0;
  while (i < text.size()) {
    // Fast path over ASCII, the bulk of most text.
    if (const auto b = static_cast<unsigned char>(text[i]); b != 0 && b < 0x80) {
      ++i;
      continue;
    }
    const std::size_t length = utf8_sequence(text, i);
    if (length == 0) return i;
    i += length;
  }
  return std::string_view::npos;
}

std::string printable(std::string_view text) {
  const auto escaped = [](const char* prefix, unsigned char value) {
    char buffer[8];
    std::snprintf(buffer, sizeof buffer, "%02X", value);
    return prefix + std::string(buffer);
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const std::size_t length = b < 0x80 ? 1 : utf8_sequence(text, i);
    if (b < 0x20 || b == 0x7F || length == 0) {
      out += escaped("\\x", b);
      ++i;
    } else if (b == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) {  // U+0080..U+009F
      out += escaped("\\u00", static_cast<unsigned char>(text[i + 1]));
      i += 2;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::int64_t line_of(std::string_view text, std::size_t offset) noexcept {
  offset = std::min(offset, text.size());
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
}

std::string read_text_file(const fs::path& file, std::uint64_t max_bytes, const std::string& fix) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw strata::OptionError("path", "cannot open " + quoted(file) + " for reading", fix);
  std::error_code ec;
  const std::uint64_t size = fs::file_size(file, ec);
  if (ec) throw strata::OptionError("path", "cannot read the size of " + quoted(file) + ": " + ec.message(), fix);
  const std::uint64_t wanted = max_bytes > 0 ? std::min(size, max_bytes) : size;
  std::string text(static_cast<std::size_t>(wanted), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(wanted)))
    throw strata::OptionError("path",
                              "could read only " + std::to_string(in.gcount()) + " of the " + std::to_string(wanted) +
                                  " bytes of " + quoted(file),
                              fix);
  const bool bom = text.rfind("\xEF\xBB\xBF", 0) == 0;
  if (bom) text.erase(0, 3);  // a byte order mark is not content
  std::size_t bad = find_invalid_utf8(text);
  // Cut at max_bytes: a character split by the cut is dropped, not reported as invalid.
  if (wanted < size && bad != std::string::npos && bad + 4 > text.size()) {
    text.resize(bad);
    bad = std::string::npos;
  }
  if (bad != std::string::npos) {
    const auto byte = static_cast<unsigned char>(text[bad]);
    throw strata::OptionError(
        "path",
        quoted(file) + " is not UTF-8 text: " +
            (byte == 0 ? std::string("a NUL byte") : "byte " + hex_byte(byte) + " starts no valid UTF-8 character") +
            " at offset " + std::to_string(bad + (bom ? 3 : 0)) + " (line " + std::to_string(line_of(text, bad)) +
            "); binary files and other encodings are not read",
        fix);
  }
  return text;
}

std::vector<fs::path> list_text_files(const DataLocation& where, const std::string& fix) {
  std::error_code ec;
  if (!fs::exists(where.path, ec))
    throw strata::OptionError("path", quoted(where.path) + where.from() + " does not exist", fix);
  if (!fs::is_directory(where.path, ec)) {
    if (!fs::is_regular_file(where.path, ec))
      throw strata::OptionError("path",
                                quoted(where.path) + where.from() + " is neither a file nor a directory",
                                fix);
    return {where.path};
  }
  std::vector<fs::path> files;
  std::error_code list_error;
  for (const auto& entry : fs::directory_iterator(where.path, list_error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.is_regular_file(ec)) continue;
    files.push_back(entry.path());
  }
  if (list_error)
    throw strata::OptionError("path", "cannot list directory " + quoted(where.path) + ": " + list_error.message(),
                              fix);
  std::sort(files.begin(), files.end());
  // A symbolic link to a file listed under its own name (Debian's GPL -> GPL-3) would count the
  // text twice: keep the file, drop the link.
  std::set<fs::path> targets;
  for (const auto& file : files)
    if (!fs::is_symlink(file, ec)) targets.insert(fs::weakly_canonical(file, ec));
  std::vector<fs::path> unique;
  for (const auto& file : files)
    if (!fs::is_symlink(file, ec) || targets.insert(fs::weakly_canonical(file, ec)).second) unique.push_back(file);
  if (unique.empty())
    throw strata::OptionError("path", "directory " + quoted(where.path) + where.from() + " holds no files",
                              fix);
  return unique;
}

}  // namespace strata::tokenizer
