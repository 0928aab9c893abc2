#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "strata/errors.hpp"

namespace strata {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

namespace {

/// ".NAME.RANDOM.tmp" beside `file`: a name nobody can plant a link at in advance, still ending in
/// .tmp; NAME is cut so that the whole stays within NAME_MAX.
fs::path temporary_name(const fs::path& file) {
  static std::mutex mutex;
  static std::mt19937_64 random;
  static pid_t seeded_by = -1;  // a fork of this process draws its own names
  std::uint64_t bits = 0;
  {
    std::lock_guard lock(mutex);
    if (seeded_by != ::getpid()) {
      seeded_by = ::getpid();
      std::random_device seed;
      std::seed_seq seq{seed(), seed(), seed(), seed(), static_cast<unsigned>(seeded_by)};
      random.seed(seq);
    }
    bits = random();
  }
  constexpr std::size_t kNameMax = 255;
  const std::string suffix = fmt::format(".{:016x}.tmp", bits);
  std::string name = file.filename().string();
  name.resize(std::min(name.size(), kNameMax - 1 - suffix.size()));
  return file.parent_path() / ("." + name + suffix);
}

}  // namespace

AtomicFile::AtomicFile(fs::path file) : file_(std::move(file)) {
  // Created exclusively and never through a link: a file or link already at the name (planted, or
  // left by a killed process) is not written through but skipped for a fresh name.
  for (int attempt = 0;; ++attempt) {
    tmp_ = temporary_name(file_);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0) return;
    if (errno != EEXIST || attempt == 16) break;
  }
  const int error = errno;
  tmp_.clear();  // nothing of ours to remove
  fail(error, "cannot create a temporary file for " + file_.string());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, std::uint64_t size, const std::string& what) {
  const auto* in = static_cast<const char*>(data);
  while (size > 0) {
    const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(size, 1ull << 30));
    const ssize_t put = ::write(fd_, in, chunk);
    if (put < 0 && errno == EINTR) continue;
    // A full disk may first take part of a write, then refuse the rest; 0 bytes is a full disk too.
    if (put <= 0)
      fail(put < 0 ? errno : ENOSPC, fmt::format("cannot write {} to {} (as {})", what, file_.string(), tmp_.string()));
    in += put;
    size -= static_cast<std::uint64_t>(put);
    size_ += static_cast<std::uint64_t>(put);
  }
}

void AtomicFile::commit() {
  // Space a file system reserves late (NFS, delayed allocation) fails here or at close.
  if (::fsync(fd_) != 0)
    fail(errno, "cannot flush " + file_.string() + " (as " + tmp_.string() + ") to disk (fsync)");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(errno, "cannot close " + file_.string() + " (as " + tmp_.string() + ")");
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
  fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (exclusive ? O_EXCL : O_TRUNC), 0644);
  struct stat link {};
  if (fd_ < 0 && errno == ELOOP && ::lstat(file.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
    throw Error(fmt::format("cannot write {}{}: it is a symbolic link, and Strata does not write through links.",
                            what_, file.string()),
                "Remove the link (it may have been planted to overwrite its target), or choose another directory.");
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
