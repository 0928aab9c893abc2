#include "io/run_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <set>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "io/atomic_file.hpp"
#include "io/build_info.hpp"
#include "strata/errors.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {
constexpr const char* kWritableFix = "Choose a writable location with --out DIR or [experiment] out_dir.";

void make_directories(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError("cannot create run directory " + dir.string() + ": " + ec.message() + ".", kWritableFix);
}

/// True when `dir` holds the outputs of a run from before markers (a new run would mix with them).
bool holds_unmarked_run(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    if (name == "summary.json" || name.find("tfevents") != std::string::npos) return true;
  }
  return false;
}

/// The marker's text; empty when there is none, or its run is still writing it.
std::string read_marker(const fs::path& dir) {
  std::ifstream in(dir / kRunMarkerFile, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The value of the marker line "`key` VALUE", empty when it has none.
std::string marker_field(const std::string& marker, const std::string& key) {
  std::istringstream lines(marker);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(key + " ", 0) == 0) return line.substr(key.size() + 1);
  return {};
}

[[noreturn]] void refuse_run_dir(const fs::path& dir, const std::string& marker) {
  std::string who;
  if (const auto pid = marker_field(marker, "pid"); !pid.empty())
    who = fmt::format(" (started {} by pid {} on {})", marker_field(marker, "started"), pid, marker_field(marker, "host"));
  else if (marker.empty() && fs::exists(dir / kRunMarkerFile))
    who = " (another run is claiming it now)";
  throw UsageError("run directory " + dir.string() + " already holds a run" + who + ".",
                   "Choose a new directory for --out, delete the old run first, or continue it with --resume.");
}

/// Creates `dir`'s marker holding this process's claim; false when `dir` has one already. The
/// exclusive creation is the claim: of runs racing for one directory exactly one gets true.
bool create_marker(const fs::path& dir) {
  StreamedFile marker;
  if (!marker.open(dir / kRunMarkerFile, /*exclusive=*/true, "the run directory's marker")) {
    if (errno == EEXIST) return false;
    throw UsageError(fmt::format("cannot claim run directory {}: cannot create {}: {}.", dir.string(),
                                 (dir / kRunMarkerFile).string(), std::strerror(errno)),
                     kWritableFix);
  }
  const std::string text = fmt::format("claim {}\npid {}\nhost {}\nstarted {}\n", run_claim(), ::getpid(), host_name(),
                                       utc_time("%Y-%m-%dT%H:%M:%SZ"));
  try {
    marker.append(text.data(), text.size());
  } catch (...) {
    marker.remove();  // never an empty marker: it would hold the directory for nobody
    throw;
  }
  return true;
}
}  // namespace

const std::string& run_claim() {
  // One per process: a fork of this one (a run of strata check or compare made in its image) makes
  // its own, as a process started afresh would.
  static std::mutex mutex;
  static pid_t claimed_by = -1;
  static std::string claim;
  std::lock_guard lock(mutex);
  if (claimed_by == ::getpid()) return claim;
  claimed_by = ::getpid();
  claim = [] {
    // Only a rank of strata's launcher takes a handed claim: one leaked into another process's
    // environment must not let it into a directory claimed by someone else.
    const char* spawned = std::getenv("STRATA_SPAWNED");
    const char* handed = std::getenv(kRunClaimVariable);
    if (spawned != nullptr && std::string(spawned) == "1" && handed != nullptr && *handed != '\0')
      return std::string(handed);
    std::random_device random;
    return fmt::format("{:08x}{:08x}-{}", random(), random(), ::getpid());
  }();
  return claim;
}

std::string run_id(const fs::path& dir) { return marker_field(read_marker(dir), "claim"); }

fs::path enclosing_run_directory(const fs::path& path) {
  std::error_code ec;
  for (fs::path dir = fs::absolute(path, ec).lexically_normal(); !dir.empty(); dir = dir.parent_path()) {
    // A run from before markers: its summary.json says so.
    if (fs::is_regular_file(dir / kRunMarkerFile, ec) || fs::is_regular_file(dir / "summary.json", ec)) return dir;
    if (dir == dir.parent_path()) break;
  }
  return {};
}

namespace {
std::mutex g_locks_mutex;
std::set<int> g_lock_fds;  // the descriptors of the locks this process holds
}  // namespace

RunDirLock::RunDirLock(int fd) : fd_(fd) {
  std::lock_guard lock(g_locks_mutex);
  g_lock_fds.insert(fd);
}

RunDirLock::~RunDirLock() {
  std::lock_guard lock(g_locks_mutex);
  // Closing the last descriptor releases the flock; a fork's own copy was closed already.
  if (fd_ >= 0 && g_lock_fds.erase(fd_) > 0) ::close(fd_);
}

void run_dir_locks_closed_in_child() noexcept {
  std::lock_guard lock(g_locks_mutex);
  for (const int fd : g_lock_fds) ::close(fd);
  g_lock_fds.clear();
}

std::unique_ptr<RunDirLock> lock_run_directory(const fs::path& dir) {
  const fs::path file = dir / kRunLockFile;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    throw UsageError(fmt::format("cannot lock run directory {}: cannot open {}: {}.", dir.string(), file.string(),
                                 std::strerror(errno)),
                     kWritableFix);
  auto lock = std::make_unique<RunDirLock>(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    // A file system without flock (ENOLCK, EOPNOTSUPP: Lustre without -o flock) locks nothing.
    if (errno != EWOULDBLOCK) {
      std::fprintf(stderr,
                   "warning: run directory %s cannot be locked (flock: %s): this file system does not guard it "
                   "against a second writer; do not resume it while it runs\n",
                   dir.c_str(), std::strerror(errno));
      return lock;
    }
    std::string holder(512, '\0');
    const ssize_t got = ::pread(fd, holder.data(), holder.size(), 0);
    holder.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
    const auto pid = marker_field(holder, "pid");
    throw UsageError(fmt::format("run directory {} is in use: {} is writing it now, and a run directory has one live "
                                 "writer.",
                                 dir.string(),
                                 pid.empty() ? std::string("another process")
                                             : fmt::format("the run started {} by pid {} on {}",
                                                           marker_field(holder, "started"), pid,
                                                           marker_field(holder, "host"))),
                     "Wait for that run to end (or stop it) before resuming it, or give this run a new directory "
                     "with --out DIR (with --resume, a new run from that checkpoint). Where that process is gone "
                     "but a network file system still holds its lock (its node crashed), remove " +
                         file.string() + ".");
  }
  return lock;
}

void RunDirLock::announce() {
  const std::string text =
      fmt::format("pid {}\nhost {}\nstarted {}\n", ::getpid(), host_name(), utc_time("%Y-%m-%dT%H:%M:%SZ"));
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, text.data(), text.size(), 0);  // only for a refusal's message
}

void remove_dead_temporaries(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // AtomicFile's ".NAME.<16 hex digits>.tmp"
    constexpr std::size_t kTail = 1 + 16 + 4;
    if (name.size() <= kTail + 1 || name[0] != '.' || name.compare(name.size() - 4, 4, ".tmp") != 0 ||
        name[name.size() - kTail] != '.')
      continue;
    const std::string digits = name.substr(name.size() - kTail + 1, 16);
    if (digits.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    if (entry.is_regular_file(ec) || entry.is_symlink(ec)) fs::remove(entry.path(), ec);
  }
}

bool launcher_holds_run_lock() {
  const char* spawned = std::getenv("STRATA_SPAWNED");
  const char* handed = std::getenv(kRunClaimVariable);
  return spawned != nullptr && std::string(spawned) == "1" && handed != nullptr && *handed != '\0';
}

std::string utc_time(const char* format) {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[64];
  std::strftime(text, sizeof text, format, &utc);
  return text;
}

fs::path make_run_directory(const fs::path& out, const std::string& out_dir, const std::string& name, RunDirUse use) {
  if (!out.empty()) {
    make_directories(out);
    if (use == RunDirUse::kShare) return out;
    if (create_marker(out)) {
      if (use == RunDirUse::kNew && holds_unmarked_run(out)) {
        ::unlink((out / kRunMarkerFile).c_str());
        refuse_run_dir(out, "");
      }
      return out;
    }
    // Marked already: by an earlier run, by a run racing this one, or by the launcher of this rank.
    if (use == RunDirUse::kNew) {
      const std::string marker = read_marker(out);
      if (marker_field(marker, "claim") != run_claim()) refuse_run_dir(out, marker);
    }
    return out;
  }
  // A new directory: mkdir fails when another run made the name first; the next suffix then.
  const fs::path base = fs::path(out_dir) / name / utc_time("%Y%m%dT%H%M%SZ");
  make_directories(base.parent_path());
  fs::path dir = base;
  for (int i = 1; ::mkdir(dir.c_str(), 0777) != 0; ++i) {
    if (errno != EEXIST)
      throw UsageError(fmt::format("cannot create run directory {}: {}.", dir.string(), std::strerror(errno)),
                       kWritableFix);
    dir = base.string() + "-" + std::to_string(i);
  }
  if (use != RunDirUse::kShare && !create_marker(dir)) refuse_run_dir(dir, read_marker(dir));
  return dir;
}

void write_text_file(const fs::path& file, const std::string& text) { write_file_atomically(file, text); }

}  // namespace strata
