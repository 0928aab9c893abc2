#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "strata/errors.hpp"

namespace strata {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

AtomicFile::AtomicFile(fs::path file) : file_(std::move(file)), tmp_(file_) {
  tmp_ += ".tmp";
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(errno, "cannot create " + tmp_.string());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, std::uint64_t size, const std::string& what) {
  const auto* in = static_cast<const char*>(data);
  while (size > 0) {
    const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(size, 1ull << 30));
    const ssize_t put = ::write(fd_, in, chunk);
    if (put < 0 && errno == EINTR) continue;
    // A full disk may first take part of a write, then refuse the rest; 0 bytes is a full disk too.
    if (put <= 0) fail(put < 0 ? errno : ENOSPC, fmt::format("cannot write {} to {}", what, tmp_.string()));
    in += put;
    size -= static_cast<std::uint64_t>(put);
    size_ += static_cast<std::uint64_t>(put);
  }
}

void AtomicFile::commit() {
  // Space a file system reserves late (NFS, delayed allocation) fails here or at close.
  if (::fsync(fd_) != 0) fail(errno, "cannot flush " + tmp_.string() + " to disk (fsync)");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(errno, "cannot close " + tmp_.string());
  if (::rename(tmp_.c_str(), file_.c_str()) != 0)
    fail(errno, "cannot rename " + tmp_.string() + " to " + file_.string());
  committed_ = true;
  const auto dir = file_.has_parent_path() ? file_.parent_path() : fs::path(".");
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    // Some file systems cannot fsync a directory (EINVAL); the file itself is safe already.
    const bool ok = ::fsync(dir_fd) == 0 || errno == EINVAL;
    const std::string text = errno_text();
    ::close(dir_fd);
    if (!ok) throw Error(fmt::format("cannot flush directory {} to disk (fsync): {}.", dir.string(), text),
                         "Check the disk and its free space.");
  }
}

void AtomicFile::fail(int error, const std::string& what) const {
  throw Error(fmt::format("{}: {}.", what, std::strerror(error)), "Check free disk space and permissions.");
}

void write_file_atomically(const fs::path& file, const std::string& text) {
  AtomicFile out(file);
  out.write(text.data(), text.size(), fmt::format("{} bytes", text.size()));
  out.commit();
}

StreamedFile::~StreamedFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool StreamedFile::open(const fs::path& file, bool exclusive, std::string what) {
  if (fd_ >= 0) ::close(fd_);
  file_ = file;
  what_ = what.empty() ? std::move(what) : std::move(what) + " ";
  size_ = 0;
  fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC), 0644);
  return fd_ >= 0;
}

void StreamedFile::append(const void* data, std::uint64_t size) {
  if (fd_ < 0) throw Error("cannot write to " + what_ + file_.string() + ": it is not open.");
  const auto* in = static_cast<const char*>(data);
  std::uint64_t done = 0;
  while (done < size) {
    const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(size - done, 1ull << 30));
    // pwrite at the end of the last complete append: after a failed one, nothing is left between.
    const ssize_t put = ::pwrite(fd_, in + done, chunk, static_cast<off_t>(size_ + done));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      const int error = put < 0 ? errno : ENOSPC;
      // Cut the torn record off; should even that fail, TFRecord and log readers stop at a torn tail.
      if (done > 0) (void)!::ftruncate(fd_, static_cast<off_t>(size_));
      throw Error(fmt::format("cannot write to {}{}: {}.", what_, file_.string(), std::strerror(error)),
                  "Check free disk space and that the directory is still writable.");
    }
    done += static_cast<std::uint64_t>(put);
  }
  size_ += size;
}

void StreamedFile::remove() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(file_.c_str());
}

bool pread_all(int fd, void* data, std::uint64_t size, std::uint64_t offset) {
  auto* out = static_cast<char*>(data);
  while (size > 0) {
    const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(size, 1ull << 30));
    const ssize_t got = ::pread(fd, out, chunk, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = 0;
      return false;
    }
    out += got;
    offset += static_cast<std::uint64_t>(got);
    size -= static_cast<std::uint64_t>(got);
  }
  return true;
}

}  // namespace strata
