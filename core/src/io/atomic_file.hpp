#pragma once
// Files that are either complete or absent: written under a temporary name, every write and the
// fsync checked, then renamed into place and the directory flushed, so a crash or a full disk
// never leaves a half-written file under the final name. Errors name the file and the system's
// reason (strata::Error). Every file Strata writes whole goes through here; files read while they
// grow (TensorBoard events, a child's output.log) are StreamedFiles.

#include <cstdint>
#include <filesystem>
#include <string>

namespace strata {

/// A file being written under a fresh name beside it (".NAME.RANDOM.tmp", created exclusively,
/// never through a link); removed unless commit() renamed it into place. The rename replaces a
/// link at `file` itself, never its target.
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
  /// Throws strata::Error "`what`: strerror(`error`)."; the destructor then removes the file.
  [[noreturn]] void fail(int error, const std::string& what) const;

  std::filesystem::path file_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  bool committed_ = false;
};

/// Writes `text` to `file` through an AtomicFile.
void write_file_atomically(const std::filesystem::path& file, const std::string& text);

/// A file that readers follow while it grows, so it cannot be renamed into place at the end: each
/// append lands whole or not at all (a failed one is cut off again, so the file ends with its last
/// complete record), and a failure is a strata::Error naming the file and the system's reason.
class StreamedFile {
 public:
  StreamedFile() = default;
  ~StreamedFile();  ///< closes the file; never throws
  StreamedFile(const StreamedFile&) = delete;
  StreamedFile& operator=(const StreamedFile&) = delete;

  /// Creates `file` (truncated, or only if it does not exist when `exclusive`), never through a
  /// symbolic link; false with errno set when it cannot be created (EEXIST: `exclusive` and it, or
  /// a link, exists). A link at `file` when not `exclusive` is a strata::Error. `what` names the
  /// file in errors ("the TensorBoard event file").
  bool open(const std::filesystem::path& file, bool exclusive, std::string what = "");
  /// Appends `size` bytes, handed to the operating system before it returns.
  void append(const void* data, std::uint64_t size);
  /// Removes the file (one whose first record could not be written), closing it first.
  void remove() noexcept;
  /// Bytes of complete appends.
  std::uint64_t size() const noexcept { return size_; }
  const std::filesystem::path& path() const noexcept { return file_; }

 private:
  std::filesystem::path file_;
  std::string what_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// Reads exactly `size` bytes at `offset` of `fd`; false with errno set on an error, errno 0 when
/// the file ends first.
bool pread_all(int fd, void* data, std::uint64_t size, std::uint64_t offset);

/// strerror(errno).
std::string errno_text();

}  // namespace strata
