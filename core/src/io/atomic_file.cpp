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
  if (fd_ < 0) fail("cannot create " + tmp_.string());
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
    if (put <= 0) fail(fmt::format("cannot write {} to {}", what, tmp_.string()));
    in += put;
    size -= static_cast<std::uint64_t>(put);
    size_ += static_cast<std::uint64_t>(put);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("cannot flush " + tmp_.string() + " to disk (fsync)");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close " + tmp_.string());
  if (::rename(tmp_.c_str(), file_.c_str()) != 0) fail("cannot rename " + tmp_.string() + " to " + file_.string());
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

void AtomicFile::fail(const std::string& what) const {
  throw Error(fmt::format("{}: {}.", what, errno_text()), "Check free disk space and permissions.");
}

void write_file_atomically(const fs::path& file, const std::string& text) {
  AtomicFile out(file);
  out.write(text.data(), text.size(), "the text");
  out.commit();
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
