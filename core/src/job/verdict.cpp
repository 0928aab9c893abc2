#include "job/verdict.hpp"

#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <sstream>

#include "io/atomic_file.hpp"
#include "strata/errors.hpp"

namespace strata {

namespace fs = std::filesystem;

Json FailureRecord::to_json() const {
  Json j = Json::object();
  j["rank"] = rank;
  j["status"] = status;
  j["error"] = error;
  j["cause_rank"] = cause_rank ? Json(*cause_rank) : Json();
  j["time"] = time;
  if (!phase.empty()) j["phase"] = phase;
  if (step) j["step"] = *step;
  return j;
}

FailureRecord FailureRecord::from_json(const Json& json) {
  const Json* rank = json.find("rank");
  if (rank == nullptr || !rank->is_number()) throw Error("a failure record without a rank");
  FailureRecord r;
  r.rank = static_cast<int>(rank->number_or(0));
  if (const Json* s = json.find("status")) r.status = s->string_or("failed");
  if (const Json* e = json.find("error")) r.error = e->string_or("");
  if (const Json* c = json.find("cause_rank"); c != nullptr && c->is_number())
    r.cause_rank = static_cast<int>(c->number_or(0));
  if (const Json* t = json.find("time")) r.time = t->number_or(0);
  if (const Json* p = json.find("phase")) r.phase = p->string_or("");
  if (const Json* s = json.find("step"); s != nullptr && s->is_number()) r.step = static_cast<std::int64_t>(s->number_or(0));
  return r;
}

fs::path failure_record_path(const fs::path& run_dir, int rank) {
  return run_dir / "failures" / ("rank_" + std::to_string(rank) + ".json");
}

void write_failure_record(const fs::path& run_dir, const FailureRecord& record) noexcept {
  if (run_dir.empty()) return;
  try {
    std::error_code ec;
    fs::create_directories(run_dir / "failures", ec);
    write_file_atomically(failure_record_path(run_dir, record.rank), record.to_json().dump() + "\n");
  } catch (const std::exception& e) {
    // The launcher then names the cause from the exit statuses alone; the user learns why.
    std::fprintf(stderr, "strata: warning: rank %d could not write its failure record: %s\n", record.rank, e.what());
  } catch (...) {
  }
}

std::vector<FailureRecord> read_failure_records(const fs::path& run_dir) {
  std::vector<FailureRecord> records;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir / "failures", ec)) {
    try {
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      records.push_back(FailureRecord::from_json(Json::parse(text.str())));
    } catch (...) {
    }
  }
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return records;
}

void clear_failure_records(const fs::path& run_dir) noexcept {
  std::error_code ec;
  if (!run_dir.empty()) fs::remove_all(run_dir / "failures", ec);
}

std::optional<FailureRecord> cause_of(const std::vector<FailureRecord>& records) {
  const FailureRecord* own = nullptr;
  const FailureRecord* blame = nullptr;
  for (const auto& r : records) {
    if (r.status != "failed" || !r.cause_rank) continue;
    const FailureRecord*& slot = *r.cause_rank == r.rank ? own : blame;
    if (slot == nullptr || r.time < slot->time) slot = &r;
  }
  if (own != nullptr) return *own;
  if (blame != nullptr) return *blame;
  return std::nullopt;
}

std::string signal_name(int signal) {
  // sigabbrev_np is glibc 2.32+; the names of the signals a job meets are spelled out here.
  switch (signal) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGSTOP: return "SIGSTOP";
    case SIGTSTP: return "SIGTSTP";
    case SIGTTIN: return "SIGTTIN";
    case SIGTTOU: return "SIGTTOU";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return "signal " + std::to_string(signal);
  }
}

namespace {
constexpr const char* kPhases[] = {"setup", "train", "eval", "checkpoint", "end"};
}  // namespace

int beacon_phase_index(const char* phase) noexcept {
  for (int i = 0; i < static_cast<int>(std::size(kPhases)); ++i)
    if (phase != nullptr && std::strcmp(phase, kPhases[i]) == 0) return i;
  return 0;
}

const char* beacon_phase_name(int index) noexcept {
  return index >= 0 && index < static_cast<int>(std::size(kPhases)) ? kPhases[index] : kPhases[0];
}

RankBeacons::RankBeacons(int ranks) noexcept {
  const std::size_t bytes = sizeof(RankBeacon) * static_cast<std::size_t>(std::max(ranks, 0));
  const int fd = ::memfd_create("strata-ranks", MFD_CLOEXEC);
  if (fd < 0 || bytes == 0) {
    if (fd >= 0) ::close(fd);
    return;
  }
  void* map = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0
                  ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
  if (map == MAP_FAILED) {
    ::close(fd);
    return;
  }
  fd_ = fd;
  ranks_ = ranks;
  beacons_ = static_cast<RankBeacon*>(map);
  reset();
}

RankBeacons::~RankBeacons() {
  if (beacons_ != nullptr) ::munmap(beacons_, sizeof(RankBeacon) * static_cast<std::size_t>(ranks_));
  if (fd_ >= 0) ::close(fd_);
}

const RankBeacon* RankBeacons::at(int local_rank) const noexcept {
  return beacons_ != nullptr && local_rank >= 0 && local_rank < ranks_ ? &beacons_[local_rank] : nullptr;
}

void RankBeacons::reset() noexcept {
  for (int i = 0; i < ranks_; ++i) new (&beacons_[i]) RankBeacon();
}

RankBeacon* RankBeacons::keep_for_child(int local_rank) noexcept {
  RankBeacon* mine = local_rank >= 0 && local_rank < ranks_ ? &beacons_[local_rank] : nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  beacons_ = nullptr;  // the mapping outlives this object: the rank writes through it
  ranks_ = 0;
  return mine;
}

fs::path RankBeacons::run_dir(int local_rank) const {
  const RankBeacon* b = at(local_rank);
  return b != nullptr ? fs::path(std::string(b->run_dir, ::strnlen(b->run_dir, sizeof b->run_dir))) : fs::path();
}

namespace {
std::atomic<RankBeacon*> g_adopted{nullptr};
}  // namespace

void adopt_rank_beacon(RankBeacon* beacon) noexcept { g_adopted = beacon; }

RankBeacon* rank_beacon() noexcept {
  if (RankBeacon* adopted = g_adopted.load()) return adopted;
  static RankBeacon* const mine = []() -> RankBeacon* {
    const char* fd_text = std::getenv(kBeaconFdVariable);
    const char* local = std::getenv("LOCAL_RANK");
    if (fd_text == nullptr || *fd_text == '\0' || local == nullptr) return nullptr;
    char* end = nullptr;
    const long fd = std::strtol(fd_text, &end, 10);
    const long slot = std::strtol(local, nullptr, 10);
    struct stat st {};
    if (*end != '\0' || fd < 0 || slot < 0 || ::fstat(static_cast<int>(fd), &st) != 0) return nullptr;
    // Only the launcher's memfd: a descriptor of that number may be anything else here.
    char target[64] = {};
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    if (::readlink(link.c_str(), target, sizeof target - 1) < 0 || std::strncmp(target, "/memfd:strata-ranks", 19) != 0)
      return nullptr;
    const auto bytes = static_cast<std::size_t>(st.st_size);
    void* map = bytes >= sizeof(RankBeacon) * static_cast<std::size_t>(slot + 1)
                    ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, static_cast<int>(fd), 0)
                    : MAP_FAILED;
    ::close(static_cast<int>(fd));  // the mapping stays
    return map == MAP_FAILED ? nullptr : static_cast<RankBeacon*>(map) + slot;
  }();
  return mine;
}

namespace {
RankBeacon* g_crash_beacon = nullptr;
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

/// The innermost frame in a Strata plugin library (libstrata_<kind>_<name>.so, not the core):
/// backtrace() and dladdr() are not async-signal-safe in general, but the process is dying and
/// both were used once before (their lazy set-up done), as crash reporters do.
void on_crash(int sig) {
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  for (int i = 0; i < n && g_crash_beacon != nullptr; ++i) {
    Dl_info info{};
    if (::dladdr(frames[i], &info) == 0 || info.dli_fname == nullptr) continue;
    const char* base = std::strrchr(info.dli_fname, '/');
    base = base != nullptr ? base + 1 : info.dli_fname;
    if (std::strncmp(base, "libstrata_", 10) != 0 || std::strncmp(base, "libstrata_core", 14) == 0) continue;
    std::size_t k = 0;
    for (; base[k] != '\0' && k + 1 < sizeof g_crash_beacon->library; ++k) g_crash_beacon->library[k] = base[k];
    g_crash_beacon->library[k] = '\0';
    break;
  }
  // SA_RESETHAND restored the default; the signal, blocked while this runs, is delivered on
  // return (before a faulting instruction could run again), and the process dies of it.
  ::raise(sig);
}
}  // namespace

void record_crash_library(RankBeacon* beacon) noexcept {
  if (beacon == nullptr || g_crash_beacon != nullptr) return;
  g_crash_beacon = beacon;
  void* warm[2];
  ::backtrace(warm, 2);  // loads the unwinder now, not inside the handler
  Dl_info info{};
  ::dladdr(reinterpret_cast<void*>(&on_crash), &info);
  // A stack of its own, for a stack overflow of this (the training) thread.
  static char alternate[1 << 16];
  stack_t stack{};
  stack.ss_sp = alternate;
  stack.ss_size = sizeof alternate;
  ::sigaltstack(&stack, nullptr);
  for (int sig : kCrashSignals) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction action {};
    action.sa_handler = on_crash;
    action.sa_flags = SA_RESETHAND | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    ::sigaction(sig, &action, nullptr);
  }
}

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace strata
