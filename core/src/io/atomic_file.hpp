#pragma once
// Files that are either complete or absent: written under a temporary name, every write and the
// fsync checked, then renamed into place and the directory flushed, so a crash or a full disk
// never leaves a half-written file under the final name. Errors name the file and the system's
// reason (strata::Error).

#include <cstdint>
#include <filesystem>
#include <string>

namespace strata {

/// A file being written as `file`.tmp; removed unless commit() renamed it into place.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path file);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `size` bytes; `what` names them in an error ("tensor x").
  void write(const void* data, std::uint64_t size, const std::string& what);
  /// Bytes written so far.
  std::uint64_t size() const noexcept { return size_; }
  /// fsync, close, rename into place, fsync the directory (so the rename survives a crash).
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what) const;

  std::filesystem::path file_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  bool committed_ = false;
};

/// Writes `text` to `file` through an AtomicFile.
void write_file_atomically(const std::filesystem::path& file, const std::string& text);

/// Reads exactly `size` bytes at `offset` of `fd`; false with errno set on an error, errno 0 when
/// the file ends first.
bool pread_all(int fd, void* data, std::uint64_t size, std::uint64_t offset);

/// strerror(errno).
std::string errno_text();

}  // namespace strata
